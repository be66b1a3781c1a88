"""What a scenario's ``load:`` asks for: the Locust load and the observers."""

from __future__ import annotations

from faultday.engine.participants import Participant
from faultday.load.config import HttpRequestSpec, Workload
from faultday.load.runner import LoadError, LoadOptions, LocustLoad
from faultday.observe.scrape import MetricsScraper
from faultday.observe.series import TimeSeriesWriter
from faultday.scenario.models import LoadSpec, Scenario


def options_for(spec: LoadSpec) -> LoadOptions:
    """Read the optional ``http`` fields of LoadSpec where the model has them."""
    http = HttpRequestSpec(
        target=getattr(spec, "target", None) or "agent",
        path=getattr(spec, "path", None) or "/health",
        method=getattr(spec, "method", None) or "GET",
        body=getattr(spec, "body", None),
        stream=bool(getattr(spec, "stream", False)),
    )
    think = getattr(spec, "think_time", None) or 0.0
    return LoadOptions(http=http, think_time=float(think))


def participants_for(scenario: Scenario) -> list[Participant]:
    """Writer, scraper, load: the engine stops them in reverse, so the load stops first
    and the writer sees every record and sample."""
    spec = scenario.spec.load
    try:
        workload = Workload(spec.workload)
    except ValueError as exc:
        valid = ", ".join(w.value for w in Workload)
        raise LoadError(f"unknown workload {spec.workload!r}; valid: {valid}") from exc
    out: list[Participant] = [
        TimeSeriesWriter(interval=spec.sample_interval),
        MetricsScraper(interval=spec.sample_interval),
    ]
    if workload != Workload.NONE and spec.users > 0:
        out.append(LocustLoad(spec, options_for(spec)))
    return out

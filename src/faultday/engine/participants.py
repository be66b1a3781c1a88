"""Participants run beside the timeline: the load generator and the observers.

The engine composes them here from what a scenario's ``load:`` asks for; it
knows them only through ``faultday.core.protocols``. ``faultday.load`` and
``faultday.observe`` provide the real ones (Locust in a subprocess, the metric
scraper, the time-series writer).
"""

from __future__ import annotations

import dataclasses

from faultday.core.loadconfig import HttpRequestSpec, Workload
from faultday.core.protocols import LoadHost, Participant, RunView
from faultday.core.scenario import LoadShape, LoadSpec, Scenario, TracesSpec
from faultday.load.runner import LoadError, LoadOptions, LocustLoad, propagation_of
from faultday.load.sink import SinkStats
from faultday.observe.procs import ProcessSampler
from faultday.observe.scrape import MetricsScraper
from faultday.observe.series import TimeSeriesWriter
from faultday.observe.trace_capture import TraceCapture

__all__ = ["Participant", "RunView", "ScenarioLoad", "default_participants", "participants_for"]

# A stack driver that runs this load itself (the kubernetes driver: Locust as Jobs).
ScenarioLoadHost = LoadHost[LoadSpec, LoadOptions]


class ScenarioLoad(LocustLoad):
    """The scenario's load: Locust processes beside the harness, unless the run's stack
    runs the load itself; then that participant does the whole job."""

    def __init__(self, spec: LoadSpec, options: LoadOptions | None = None) -> None:
        super().__init__(spec, options)
        self.delegate: Participant | None = None

    def start(self, run: RunView) -> None:
        # The stack is known only now (participants are made before it).
        host: ScenarioLoadHost | None = run.stack if isinstance(run.stack, LoadHost) else None
        delegate = host.load_participant(self.spec, self.options) if host is not None else None
        if delegate is None:
            super().start(run)
            return
        self.delegate = delegate
        delegate.start(run)

    def stop(self) -> None:
        if self.delegate is not None:
            self.delegate.stop()
            return
        super().stop()

    @property
    def stats(self) -> SinkStats:
        if self.delegate is not None:
            got = getattr(self.delegate, "stats", None)
            return got if isinstance(got, SinkStats) else SinkStats()
        return super().stats


def options_for(spec: LoadSpec, traces: TracesSpec | None = None) -> LoadOptions:
    """Read the optional ``http`` fields of LoadSpec where the model has them, and what the
    load takes from the scenario's ``traces:`` (whether and how often to send a traceparent)."""
    http = HttpRequestSpec(
        target=getattr(spec, "target", None) or "agent",
        path=getattr(spec, "path", None) or "/health",
        method=getattr(spec, "method", None) or "GET",
        body=getattr(spec, "body", None),
        stream=bool(getattr(spec, "stream", False)),
    )
    think = getattr(spec, "think_time", None) or 0.0
    options = LoadOptions(http=http, think_time=float(think))
    if traces is not None:
        options = dataclasses.replace(options, traces=propagation_of(traces))
    return options


def participants_for(scenario: Scenario) -> list[Participant]:
    """Trace capture, writer, scraper, process sampler (soak), load: the engine stops them
    in reverse, so the load stops first, the writer sees every record and sample, and the
    trace capture waits for the load's last spans."""
    spec = scenario.spec.load
    try:
        workload = Workload(spec.workload)
    except ValueError as exc:
        valid = ", ".join(w.value for w in Workload)
        raise LoadError(f"unknown workload {spec.workload!r}; valid: {valid}") from exc
    out: list[Participant] = []
    traces = scenario.spec.traces
    if traces.enabled:
        # First, so it stops last: the load's last requests have their spans by then.
        out.append(TraceCapture(max_spans=traces.max_spans, forward=traces.forward))
    out += [
        TimeSeriesWriter(interval=spec.sample_interval),
        MetricsScraper(interval=spec.sample_interval),
    ]
    if spec.shape == LoadShape.SOAK:
        # A soak judges drift: each component's RSS and open FDs join the time series.
        out.append(ProcessSampler(interval=spec.sample_interval))
    if workload != Workload.NONE and spec.users > 0:
        out.append(ScenarioLoad(spec, options_for(spec, scenario.spec.traces)))
    return out


def default_participants(scenario: Scenario) -> list[Participant]:
    """The load and observers a scenario asks for."""
    return participants_for(scenario)

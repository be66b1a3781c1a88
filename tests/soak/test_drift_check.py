"""The drift check on recorded series: it fails a creeping series, passes a flat one, and
says INSUFFICIENT (and why) when the data cannot decide."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pydantic import ValidationError

from faultday.checks.base import check_registry
from faultday.checks.soak import FDS, RSS
from faultday.core.records import Observations, RequestRecord, Sample
from faultday.core.targets import Target
from faultday.core.windows import CheckResult, Verdict, Window, WindowKind

RUN = Window(WindowKind.RUN, "whole run", 0.0, 120.0)
MIB = 2**20


@dataclass
class Recorded:
    """A CheckContext over recorded observations (what the engine's Run offers after a run)."""

    observations: Observations = field(default_factory=Observations)
    time_scale: float = 1.0
    run_dir: Path = Path()

    def fault_times(self, fault: str) -> tuple[float, float]:
        raise AssertionError("the drift check reads no fault times")

    def target(self, name: str) -> Target:
        raise AssertionError(f"a recorded check must not probe {name}")


def judge(ctx: Recorded, window: Window = RUN, **params: object) -> CheckResult:
    check = check_registry().get("drift")()
    return check.evaluate(ctx, check.parse(params), window)  # type: ignore[arg-type]


def rss(mib_per_min: float, *, n: int = 120, noise_mib: float = 2.0, seed: int = 0) -> Recorded:
    """One RSS sample a second for component llm, growing at ``mib_per_min``."""
    rng = random.Random(seed)
    ctx = Recorded()
    labels = (("component", "llm"),)
    ctx.observations.add_samples(
        Sample(
            t=float(i),
            name=RSS,
            value=(200.0 + mib_per_min * i / 60 + rng.gauss(0, noise_mib)) * MIB,
            labels=labels,
        )
        for i in range(n)
    )
    # another component, flat: the check reads only its target's series
    ctx.observations.add_samples(
        Sample(t=float(i), name=RSS, value=1e9, labels=(("component", "other"),)) for i in range(n)
    )
    return ctx


def test_a_leak_above_the_margin_fails_naming_slope_and_interval() -> None:
    r = judge(rss(60.0), series="rss", target="llm", max_slope="10MiB/min")
    assert r.verdict == Verdict.FAILED
    assert r.expected == "slope ≤ 10 MiB/min (whole 95% interval)"
    assert r.observed.startswith("slope +6") and "MiB/min, 95% CI [+" in r.observed
    assert "whole interval is above the margin" in r.message
    assert r.n == 120


def test_a_flat_series_passes() -> None:
    r = judge(rss(0.0), series="rss", target="llm", max_slope="10MiB/min")
    assert r.verdict == Verdict.PASSED, r.describe()
    assert "below the margin" in r.message


def test_an_interval_that_straddles_the_margin_is_insufficient_and_says_so() -> None:
    # 10 MiB/min of true growth against a 10 MiB/min margin: no honest verdict either way.
    r = judge(rss(10.0, noise_mib=20.0), series="rss", target="llm", max_slope="10MiB/min")
    assert r.verdict == Verdict.INSUFFICIENT, r.describe()
    assert "straddles the margin 10 MiB/min; run longer" in r.message
    assert "95% CI [" in r.observed


def test_too_few_points_is_insufficient() -> None:
    r = judge(rss(600.0, n=8), series="rss", target="llm", max_slope="10MiB/min")
    assert r.verdict == Verdict.INSUFFICIENT
    assert "too few points (too short) to judge: 8 in the window, need at least 10" in r.message


def test_slopes_are_per_real_minute_under_a_time_scale() -> None:
    # 30 MiB a scenario minute at --time-scale 0.5 is 60 MiB a real minute.
    ctx = rss(30.0, noise_mib=0.0)
    ctx.time_scale = 0.5
    r = judge(ctx, series="rss", target="llm", max_slope="45MiB/min")
    assert r.verdict == Verdict.FAILED
    assert r.observed.startswith("slope +60 MiB/min")


def test_units_of_the_margin_convert() -> None:
    ctx = rss(60.0, noise_mib=0.0)  # 1 MiB/s
    assert judge(ctx, series="rss", target="llm", max_slope="2MiB/s").verdict == Verdict.PASSED
    assert judge(ctx, series="rss", target="llm", max_slope="3GiB/h").verdict == Verdict.FAILED
    assert judge(ctx, series="rss", target="llm", max_slope="59MiB/min").verdict == Verdict.FAILED


def test_p99_latency_per_interval_creeping_fails() -> None:
    ctx = Recorded()
    # 20 requests a second; latency grows 0.5 s a minute
    ctx.observations.add_requests(
        RequestRecord(t=i / 20, duration=0.1 + 0.5 * (i / 20) / 60, ok=True) for i in range(2400)
    )
    r = judge(ctx, series="e2e_p99", max_slope="100ms/min")
    assert r.verdict == Verdict.FAILED, r.describe()
    assert r.n == 24  # 120 s in 5 s intervals
    assert r.observed.startswith("slope +50") and "ms/min" in r.observed


def test_error_rate_per_interval_flat_passes_and_empty_intervals_are_gaps() -> None:
    ctx = Recorded()
    ctx.observations.add_requests(
        RequestRecord(t=i / 10, duration=0.1, ok=i % 20 != 0) for i in range(600)
    )  # 5% errors, and no requests at all after t=60
    r = judge(ctx, series="error_rate", max_slope="1%/min")
    assert r.verdict == Verdict.PASSED, r.describe()
    assert r.n == 12  # 60 s of requests: the 12 empty intervals are not zeros


def test_fds_and_preemptions_read_their_samples() -> None:
    ctx = Recorded()
    labels = (("component", "llm"),)
    ctx.observations.add_samples(
        Sample(t=float(i), name=FDS, value=float(20 + i // 6), labels=labels) for i in range(60)
    )
    r = judge(ctx, series="fds", target="llm", max_slope="2/min")
    assert r.verdict == Verdict.FAILED
    assert r.observed.startswith("slope +10/min")
    ctx.observations.add_samples(
        Sample(t=float(i), name="vllm:num_preemptions_total", value=3.0, labels=labels)
        for i in range(60)
    )
    assert judge(ctx, series="preemptions", max_slope="1/min").verdict == Verdict.PASSED


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"series": "rss", "max_slope": "5MiB/min"}, "series rss needs a target component"),
        (
            {"series": "rss", "target": "llm", "max_slope": "5ms/min"},
            "unit 'ms' does not fit rss; valid: B, KiB, MiB, GiB, kB, MB",
        ),
        (
            {"series": "fds", "target": "llm", "max_slope": "lots"},
            "is not <number><unit>/<s|min|h>",
        ),
        ({"series": "metric", "max_slope": "1/min"}, "give metric exactly when series is metric"),
        ({"series": "heap", "max_slope": "1/min"}, "series"),
        (
            {"series": "rss", "target": "llm", "max_slope": 20},
            "max_slope 20 has no unit; write it as <number><unit>/<s|min|h>, e.g. 20MiB/min",
        ),
        ({"series": "fds", "target": "llm", "max_slope": "20"}, "is not <number><unit>/<s|min|h>"),
        (
            {"series": "rss", "target": "llm", "max_slope": "1e999MiB/min"},
            "is too large to be a number; a margin is finite",
        ),
        ({"series": "rss", "target": "llm", "max_slope": "-5MiB/min"}, "is not above zero"),
        ({"series": "fds", "target": "llm", "max_slope": "0/min"}, "is not above zero"),
        ({"series": "rss", "target": "llm", "max_slope": True}, "must be text such as 5MiB/min"),
    ],
)
def test_bad_params_are_refused_with_what_is_valid(params: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace("|", r"\|")):
        check_registry().get("drift")().parse(params)  # type: ignore[arg-type]

"""The capacity check on recorded step loads: knee, best rate within SLA, pass/fail/insufficient."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from faultday.checks.base import check_registry
from faultday.checks.capacity import StepSpan, step_spans
from faultday.core.clock import Clock
from faultday.core.loadconfig import Shape, ShapeSpec
from faultday.core.protocols import StackDriver
from faultday.core.records import Observations, RequestRecord
from faultday.core.scenario import Scenario
from faultday.core.targets import Target
from faultday.core.windows import CheckResult, Verdict, Window, WindowKind
from faultday.engine.plan import Plan, make_plan

RUN = Window(WindowKind.RUN, "whole run", 0.0, 120.0)


def plan(load: dict[str, object], duration: str = "120s") -> Plan:
    scenario = Scenario.model_validate(
        {
            "apiVersion": "faultday/v1",
            "kind": "Scenario",
            "metadata": {"name": "cap", "title": "cap"},
            "spec": {"duration": duration, "load": load},
        }
    )
    return make_plan(scenario, time_scale=1.0)


STEP_LOAD = {"workload": "chat", "users": 16, "shape": "step", "step_users": 4, "step_every": "30s"}


@dataclass
class Recorded:
    """A CheckContext over recorded observations, with the scenario's plan."""

    plan: Plan
    observations: Observations = field(default_factory=Observations)
    run_dir: Path | None = None
    clock: Clock = field(default_factory=Clock)
    time_scale: float = 1.0
    stack: StackDriver | None = None  # recorded: no live stack

    def fault_times(self, fault: str) -> tuple[float, float]:
        raise AssertionError(f"no faults here: {fault}")

    def target(self, name: str) -> Target:
        raise AssertionError(f"recorded checks must not probe {name}")


def closed_loop(users: int, start: float, end: float, latency: float) -> list[RequestRecord]:
    """What ``users`` users without think time send when each request takes ``latency``."""
    out: list[RequestRecord] = []
    for u in range(users):
        t = start + u * latency / users
        while t + latency < end:
            out.append(RequestRecord(t=t, duration=latency, ok=True, name="chat", tokens=50))
            t += latency
    return out


def ramp(latencies: list[float], *, every: float = 30.0, step: int = 4) -> Observations:
    obs = Observations()
    for k, lat in enumerate(latencies):
        obs.add_requests(closed_loop(step * (k + 1), k * every, (k + 1) * every, lat))
    return obs


# The stack saturates at 8 users: latency flat, then grows with users (throughput plateaus).
KNEE_AT_3 = [0.2, 0.2, 0.5, 0.8]


def judge(ctx: Recorded, window: Window = RUN, **params: object) -> CheckResult:
    cls = check_registry().get("capacity")
    inst = cls()
    return inst.evaluate(ctx, inst.parse(params), window)  # type: ignore[arg-type]


def test_step_spans_follow_the_load_and_merge_capped_steps() -> None:
    shape = ShapeSpec(kind=Shape.STEP, users=10, spawn_rate=8, step_users=4, step_every=30)
    spans = step_spans(shape, duration=150, start=0, end=150)
    # 4, 8, then 10 (capped) from t=60 to the end: the capped steps are one step.
    assert spans == [StepSpan(4, 0, 30), StepSpan(8, 30, 60), StepSpan(10, 60, 150)]
    assert step_spans(shape, duration=150, start=40, end=70) == [
        StepSpan(8, 40, 60),
        StepSpan(10, 60, 70),
    ]


def test_a_constructed_knee_and_the_best_rate_within_sla_are_found(tmp_path: Path) -> None:
    ctx = Recorded(plan(STEP_LOAD), ramp(KNEE_AT_3), run_dir=tmp_path)
    r = judge(ctx, slo_p99="600ms", min_throughput=30)
    # Step 2 (8 users at 0.2 s) gives 40 req/s; step 3 (12 at 0.5 s) 24 req/s; step 4 over SLA.
    assert r.verdict == Verdict.PASSED, r.describe()
    assert r.observed == (
        "knee at step 3 (12 users, p99 500ms); 40 req/s max within SLA (step 2, 8 users)"
    )
    assert r.expected == "≥ 30 req/s within SLA (p99 ≤ 600ms, errors ≤ 1%)"
    assert "4) 16u 20 req/s 1000 tok/s p99 800ms err 0% over SLA" in r.message
    doc = json.loads((tmp_path / "capacity-whole-run.json").read_text())
    assert doc["knee_step"] == 3 and doc["best_step"] == 2
    assert [s["users"] for s in doc["steps"]] == [4, 8, 12, 16]
    assert [s["meets_sla"] for s in doc["steps"]] == [True, True, True, False]


def test_min_throughput_fails_when_the_sla_caps_it() -> None:
    ctx = Recorded(plan(STEP_LOAD), ramp(KNEE_AT_3))
    # A tighter SLA leaves only steps 1 and 2 (≤ 0.2 s): 40 req/s.
    r = judge(ctx, slo_p99="300ms", min_throughput=45)
    assert r.verdict == Verdict.FAILED
    assert "40 req/s max within SLA (step 2, 8 users)" in r.observed
    # Tokens: 50 per request, so 2000 tok/s at step 2.
    tok = judge(ctx, slo_p99="300ms", unit="tokens", min_throughput=1500)
    assert tok.verdict == Verdict.PASSED
    assert "2000 tok/s max within SLA" in tok.observed


def test_no_step_within_sla_fails_and_no_knee_is_said() -> None:
    ctx = Recorded(plan(STEP_LOAD), ramp([0.5, 0.5, 0.6, 0.7]))
    r = judge(ctx, slo_p99="100ms")
    assert r.verdict == Verdict.FAILED
    assert r.observed == "no knee up to 16 users; no step within SLA"


def test_errors_take_a_step_out_of_the_sla() -> None:
    obs = ramp([0.2, 0.2, 0.2, 0.2])
    # Step 4 (t 90..120): every request fails fast (shedding): P99 is fine, the error rate is not.
    obs.add_requests(
        RequestRecord(t=95 + i * 0.1, duration=0.01, ok=False, status=429, name="chat")
        for i in range(100)
    )
    r = judge(Recorded(plan(STEP_LOAD), obs), slo_p99="1s", max_error_rate=0.01)
    assert "60 req/s max within SLA (step 3, 12 users)" in r.observed
    assert "4) 16u 80 req/s 4000 tok/s p99 200ms err 4.42% over SLA" in r.message
    assert judge(
        Recorded(plan(STEP_LOAD), obs), slo_p99="1s", max_error_rate=0.05
    ).observed.endswith("(step 4, 16 users)")


def test_a_step_within_sla_after_one_that_broke_it_does_not_count() -> None:
    # Step 3 breaks a 400 ms SLA; step 4 meets it again (noise) with more req/s: not capacity.
    ctx = Recorded(plan(STEP_LOAD), ramp([0.2, 0.3, 0.5, 0.35]))
    r = judge(ctx, slo_p99="400ms")
    assert r.observed.endswith("max within SLA (step 2, 8 users)"), r.observed
    assert "4) 16u 45.7 req/s" in r.message and "p99 350ms err 0% ok" in r.message


def test_knee_is_against_the_lowest_p99_before_not_only_the_first() -> None:
    # Step 1 is slow (cold); step 2 is fast; step 3 is 2.5 × step 2 though only 1.25 × step 1.
    ctx = Recorded(plan(STEP_LOAD), ramp([0.4, 0.2, 0.5, 0.5]))
    r = judge(ctx, slo_p99="1s")
    assert r.observed.startswith("knee at step 3 (12 users, p99 500ms)")


def test_a_p99_spike_that_falls_back_is_not_the_knee() -> None:
    # Step 2 doubles step 1 but step 3 falls back below 2 × 0.2 s: the knee is step 4.
    ctx = Recorded(plan(STEP_LOAD), ramp([0.2, 0.5, 0.3, 0.6]))
    r = judge(ctx, slo_p99="1s")
    assert r.observed.startswith("knee at step 4 (16 users, p99 600ms)"), r.observed


def test_requests_belong_to_the_step_they_completed_in_time_scaled() -> None:
    # At --time-scale 0.1 a 30 s step is 3 real seconds; a 0.2 s request spans 2 scenario seconds.
    obs = Observations()
    for k, users in enumerate((4, 8, 12, 16)):
        for u in range(users):
            t = k * 30.0 + u * 0.1
            while t + 2.0 < (k + 1) * 30.0:
                obs.add_requests([RequestRecord(t=t, duration=0.2, ok=True, name="chat")])
                t += 2.0
    ctx = Recorded(plan(STEP_LOAD), obs, time_scale=0.1)
    r = judge(ctx, slo_p99="1s")
    # Rates are per real second: 16 users at 0.2 s = 80 req/s, whatever the time scale.
    assert "79" in r.observed or "80" in r.observed, r.observed
    assert "(step 4, 16 users)" in r.observed


def test_too_few_steps_or_samples_is_insufficient() -> None:
    few = Observations()
    few.add_requests(closed_loop(4, 0, 30, 0.2))  # only the first step ran
    r = judge(Recorded(plan(STEP_LOAD), few), slo_p99="1s", min_throughput=1)
    assert r.verdict == Verdict.INSUFFICIENT
    assert "1 of 4, need at least 2" in r.message
    sparse = judge(Recorded(plan(STEP_LOAD), ramp(KNEE_AT_3)), slo_p99="1s", min_samples=1000)
    assert sparse.verdict == Verdict.INSUFFICIENT  # 540, 1080, 648, 540 requests: only step 2
    assert "1 of 4" in sparse.message and "4) 16u 20 req/s" in sparse.message
    empty = judge(Recorded(plan(STEP_LOAD)), slo_p99="1s")
    assert empty.verdict == Verdict.INSUFFICIENT


def test_a_load_that_is_not_a_step_load_is_an_error() -> None:
    ctx = Recorded(plan({"workload": "chat", "users": 8}), ramp(KNEE_AT_3))
    r = judge(ctx, slo_p99="1s")
    assert r.verdict == Verdict.ERROR
    assert "load.shape: step" in r.message


def test_params_are_validated() -> None:
    inst = check_registry().get("capacity")()
    with pytest.raises(ValueError, match="slo_p99"):
        inst.parse({})
    with pytest.raises(ValueError, match="knee_factor"):
        inst.parse({"slo_p99": "1s", "knee_factor": 1})
    assert inst.parse({"slo_p99": "250ms"}).slo_p99 == 0.25  # type: ignore[attr-defined]

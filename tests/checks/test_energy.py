"""tokens_per_joule on recorded dcgm-exporter and vLLM scrapes (the scraper's own parser)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import ValidationError
from tests.checks.test_recorded import Recorded, judge
from tests.report.telemetry import phase, samples

from faultday.checks.base import check_registry
from faultday.core.records import Observations, RequestRecord
from faultday.core.windows import Verdict, Window, WindowKind

BASE = Window(WindowKind.BASELINE, "baseline", 0.0, 20.0)
FAULT = Window(WindowKind.FAULT, "during throttle", 20.0, 40.0, fault="throttle")


@dataclass
class _Plan:
    def window(self, kind: WindowKind, fault: str = "") -> Window:
        assert kind == WindowKind.BASELINE
        return BASE


def _ctx(**fault: object) -> Recorded:
    obs = Observations()
    obs.add_samples(samples(phase(), phase(**fault)))
    return Recorded(observations=obs, plan=_Plan())  # type: ignore[arg-type]


def test_absolute_minimum() -> None:
    ctx = _ctx()  # 50 tokens/s at 400 W: 0.125 tokens per joule
    ok = judge(ctx, "tokens_per_joule", FAULT, min=0.1)
    assert ok.verdict == Verdict.PASSED, ok.describe()
    assert ok.observed == "0.125 tok/J"
    assert "llm-primary" in ok.message
    low = judge(ctx, "tokens_per_joule", FAULT, min=0.2)
    assert low.verdict == Verdict.FAILED
    assert low.expected == "≥ 0.2 tok/J"


def test_ratio_to_baseline() -> None:
    # Throttled: 20 tokens/s at 250 W (0.08 tok/J) against 0.125 in baseline.
    ctx = _ctx(gpu_tokens=20.0, gpu_power=250.0)
    bad = judge(ctx, "tokens_per_joule", FAULT, ratio_min=0.8)
    assert bad.verdict == Verdict.FAILED, bad.describe()
    assert bad.observed == "0.64x"
    assert "vs 0.125 tok/J in baseline" in bad.message
    assert judge(ctx, "tokens_per_joule", FAULT, ratio_min=0.6).verdict == Verdict.PASSED


def test_goodput_counts_only_requests_within_the_slo() -> None:
    ctx = _ctx()
    # Half of the fault window's requests take 2 s: outside a 1 s e2e SLO.
    ctx.observations.requests.clear()
    ctx.observations.add_requests(
        RequestRecord(t=20.0 + i * 0.1, duration=2.0 if i % 2 else 0.3, ok=True, tokens=10)
        for i in range(200)
    )
    all_tokens = judge(ctx, "tokens_per_joule", FAULT, min=0.01)
    good = judge(ctx, "tokens_per_joule", FAULT, min=0.01, goodput=True, slo_e2e="1s")
    assert all_tokens.observed == "0.125 tok/J"
    assert good.observed == "0.0625 tok/J"
    assert good.label.startswith("tokens_per_joule goodput")


def test_without_gpu_metrics_it_is_insufficient_never_passed() -> None:
    ctx = Recorded(observations=Observations(), plan=_Plan())  # type: ignore[arg-type]
    res = judge(ctx, "tokens_per_joule", FAULT, min=0.1)
    assert res.verdict == Verdict.INSUFFICIENT
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in res.message
    other = judge(_ctx(), "tokens_per_joule", FAULT, min=0.1, target="llm-backup")
    assert other.verdict == Verdict.INSUFFICIENT


def test_params_need_a_bound() -> None:
    check = check_registry().get("tokens_per_joule")()
    with pytest.raises(ValidationError, match="min"):
        check.parse({})
    with pytest.raises(ValidationError):
        check.parse({"min": -1})

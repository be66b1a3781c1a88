"""Canary checks on recorded observations: token_length, latency_ratio, per-model filters."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from tests.checks.test_recorded import BASE, ctx_with, judge, reqs

from faultday.core.windows import Verdict

V1, V2 = "sim-primary", "sim-primary-v2"


def canary(tokens_v2: int, dur_v2: float, *, n_v2: int = 12) -> object:
    """95 answers by v1 (80 tokens, 0.5 s) and n_v2 by the canary in the window 10–20 s."""
    return ctx_with(
        reqs(10, 20, 95, model=V1, tokens=80, duration=0.5),
        reqs(10.01, 20, n_v2, model=V2, tokens=tokens_v2, duration=dur_v2),
        reqs(10.02, 20, 5, ok=False, status=503, error="HTTP 503"),  # no model: never counted
    )


def test_token_length_ratio_catches_answers_twice_as_long() -> None:
    r = judge(canary(160, 1.0), "token_length", model=V2, against=V1, min=1.7, max=2.3)
    assert r.verdict == Verdict.PASSED, r.describe()
    assert r.observed == "2x" and "160 tok vs 80 tok (n=12 vs 95)" in r.message
    same = judge(canary(82, 0.5), "token_length", model=V2, against=V1, min=1.7, max=2.3)
    assert same.verdict == Verdict.FAILED and same.observed == "1.02x"


def test_token_length_absolute_and_percentile() -> None:
    ctx = canary(160, 1.0)
    assert judge(ctx, "token_length", model=V2, max=120).verdict == Verdict.FAILED
    r = judge(ctx, "token_length", model=V1, percentile=99, max=96)
    assert r.verdict == Verdict.PASSED and r.observed == "80 tok"


def test_token_length_too_few_canary_answers_is_insufficient() -> None:
    r = judge(canary(160, 1.0, n_v2=4), "token_length", model=V2, against=V1, min=1.7)
    assert r.verdict == Verdict.INSUFFICIENT
    assert f"answers by {V2}" in r.message and "4 in the window, need at least 10" in r.message
    # Only the window counts: the baseline has no canary at all.
    r = judge(canary(160, 1.0), "token_length", window=BASE, model=V2, against=V1, min=1.7)
    assert r.verdict == Verdict.INSUFFICIENT


def test_latency_ratio_pass_fail_insufficient() -> None:
    slow = judge(canary(160, 1.0), "latency_ratio", model=V2, against=V1, min=1.5)
    assert slow.verdict == Verdict.PASSED and slow.observed == "2x", slow.describe()
    same = judge(canary(80, 0.55), "latency_ratio", model=V2, against=V1, min=1.5)
    assert same.verdict == Verdict.FAILED and same.observed == "1.1x"
    few = judge(canary(160, 1.0, n_v2=3), "latency_ratio", model=V2, against=V1, min=1.5)
    assert few.verdict == Verdict.INSUFFICIENT
    with pytest.raises(ValidationError):  # the reference model is required
        judge(canary(160, 1.0), "latency_ratio", model=V2, min=1.5)


def test_latency_and_throughput_filter_by_model() -> None:
    ctx = canary(160, 1.0)
    r = judge(ctx, "latency", metric="e2e", percentile=50, model=V2, min="0.9s")
    assert r.verdict == Verdict.PASSED and r.n == 12
    assert judge(ctx, "latency", percentile=50, model=V1, min="0.9s").verdict == Verdict.FAILED
    few = judge(canary(160, 1.0, n_v2=4), "latency", model=V2, max="2s")
    assert few.verdict == Verdict.INSUFFICIENT
    tput = judge(ctx, "throughput", unit="tokens", model=V2, min=150)
    assert tput.verdict == Verdict.PASSED and tput.observed == "192 tok/s"

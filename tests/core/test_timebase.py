"""Scenario time for observers (scraper, process sampler, the load's sink) before and after
the engine fixes t=0: warm-up waits for the load, so the expected t=0 may pass first."""

from __future__ import annotations

import time

import pytest

from faultday.core.clock import Clock
from faultday.core.timebase import TimeBase


def test_while_t0_is_pending_times_stay_at_or_before_warm_ups_start() -> None:
    clock = Clock(scale=0.01, t0_pending=True)  # a 5 s warm-up is 50 ms
    tb = TimeBase(clock, warmup=5.0)
    late = tb.expected_t0 + 0.2  # warm-up has not begun though its expected end has passed
    assert tb.at(late) == -5.0  # not +20 s: that would sit in the baseline
    assert tb.at(tb.expected_t0 - 0.04) == -5.0  # 10 ms after the load started: still pinned
    assert tb.at(tb.expected_t0 - 0.06) == pytest.approx(-6.0)  # what came before stays before
    time.sleep(0.07)
    assert not tb.started() and tb.exact(time.time()) is None  # no guessing while pending
    # The engine starts warm-up: t=0 is 50 ms from now, and times are exact from here on.
    clock.t0_wall, clock.t0_pending = time.time() + 0.05, False
    assert tb.started()
    assert tb.exact(clock.t0_wall + 0.03) == pytest.approx(3.0)
    assert tb.at(clock.t0_wall - 0.05) == pytest.approx(-5.0)


def test_a_clock_not_pending_falls_back_to_the_expected_t0_as_before() -> None:
    # Benches and standalone runs start their clock themselves; after the expected t=0
    # (+1 s) the time base stops waiting for a change of t0 that will never come.
    clock = Clock(scale=1.0)
    tb = TimeBase(clock, warmup=0.0)
    assert not tb.started()
    tb.expected_t0 -= 1.5  # as if 1.5 s had passed
    assert tb.started()
    assert tb.exact(clock.t0_wall + 2.0) == pytest.approx(2.0)

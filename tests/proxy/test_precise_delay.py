"""An injected delay is never early, and the polling that makes it precise is bounded.

Where the native relay is built it applies a latency toxic itself (a timerfd, never
early); the Python path (``FAULTDAY_PROXY_NATIVE=0``, or HTTP edges) polls through
the last 1.5 ms of a hold instead of trusting a timer (bench/proxy measures the
precision). These tests pin the behaviour on whichever path the server takes.
"""

from __future__ import annotations

import statistics
import time

from tests.proxy.conftest import EchoServer
from tests.proxy.test_proxy_toxics import connect, rtt

from faultday.proxy import ProxyServer
from faultday.proxy.client import ToxiproxyClient
from faultday.proxy.eventloop import SpinBudget


def test_the_polling_budget_is_a_bounded_token_bucket() -> None:
    budget = SpinBudget(rate=0.05, burst=0.01)
    assert budget.take(0.006)
    assert not budget.take(0.006)  # over what is left: refused, nothing spent
    assert budget.take(0.004)
    time.sleep(0.1)  # refills at 5 % of wall time, never above the burst
    assert budget.take(0.004)
    assert not budget.take(0.007)


def test_a_latency_toxic_never_delivers_early(inproc: ProxyServer, echo: EchoServer) -> None:
    with ToxiproxyClient(inproc.api_url) as api:
        port = api.create_proxy("edge", upstream=echo.addr).port
        api.add_toxic("edge", type="latency", attributes={"latency": 20})
        with connect(port) as s:
            got = [rtt(s) for _ in range(30)]
    # The hold starts when the proxy reads the reply, after the request went out,
    # so every round trip is at least the requested delay; a timer woken "early
    # to make up for the wake-up" would break this.
    assert min(got) >= 0.020, min(got)
    assert statistics.median(got) < 0.035, got


def test_without_a_polling_budget_the_delay_still_holds(
    inproc: ProxyServer, echo: EchoServer
) -> None:
    with ToxiproxyClient(inproc.api_url) as api:
        port = api.create_proxy("edge", upstream=echo.addr).port
        inproc.proxies["edge"].spin = SpinBudget(rate=0.0, burst=0.0)  # always refused
        api.add_toxic("edge", type="latency", attributes={"latency": 20})
        with connect(port) as s:
            got = [rtt(s) for _ in range(10)]
    # The timer path wakes up to TIMER_LEAD (0.2 ms) early to absorb its own wake-up.
    assert min(got) >= 0.0195, min(got)
    assert statistics.median(got) < 0.035, got

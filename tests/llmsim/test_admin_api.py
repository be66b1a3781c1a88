"""The simulator's own admin API (/admin/leak, /admin/faults) against a live process:
bounded, strict, and every refusal in the API's error shape."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from tests.llmsim.conftest import Sim

from faultday_refstack.llmsim.faults import host_memory_mib
from faultday_wire.admin import FAULTS_PATH, LEAK_MAX_MIB, LEAK_PATH, FaultKind


@pytest.fixture
def sim(start_sim: Callable[..., Sim]) -> Iterator[Sim]:
    sim = start_sim()
    yield sim
    httpx.delete(sim.url + LEAK_PATH, timeout=5)


def _put(sim: Sim, body: object) -> httpx.Response:
    return httpx.put(sim.url + LEAK_PATH, json=body, timeout=10)


def _api_error(resp: httpx.Response, status: int) -> dict[str, Any]:
    """The admin API's error shape: ``{"error": {message, type, param, code}}``, nothing else."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert list(body) == ["error"], body
    error: dict[str, Any] = body["error"]
    assert sorted(error) == ["code", "message", "param", "type"], error
    assert error["code"] == status
    return error


def _held(sim: Sim) -> int:
    return int(httpx.get(sim.url + LEAK_PATH, timeout=5).json()["held_mib"])


def test_max_mib_is_bounded_by_the_hard_cap_and_the_machines_memory(sim: Sim) -> None:
    error = _api_error(_put(sim, {"rate_mib_per_min": 1.0, "max_mib": LEAK_MAX_MIB + 1}), 400)
    assert error["param"] == "body.max_mib"
    total, _ = host_memory_mib()
    if total <= LEAK_MAX_MIB:  # all of the machine's memory is never spare: a margin stays
        error = _api_error(_put(sim, {"rate_mib_per_min": 1.0, "max_mib": total}), 400)
        assert error["param"] == "body.max_mib"
        assert "more than this machine can spare" in error["message"], error
    assert httpx.get(sim.url + LEAK_PATH, timeout=5).json()["active"] is False
    ok = _put(sim, {"rate_mib_per_min": 1.0, "max_mib": 8})  # well within: taken
    assert ok.status_code == 200, ok.text
    assert ok.json()["max_mib"] == 8


def test_a_lower_max_releases_what_is_held_above_it(sim: Sim) -> None:
    resp = _put(sim, {"rate_mib_per_min": 60000.0, "max_mib": 64})  # 1000 MiB/s: full at once
    assert resp.status_code == 200, resp.text
    deadline = time.monotonic() + 10
    while _held(sim) < 64 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _held(sim) == 64
    state = _put(sim, {"rate_mib_per_min": 60000.0, "max_mib": 8}).json()
    assert (state["held_mib"], state["max_mib"], state["released_mib"]) == (8, 8, 56)
    time.sleep(0.6)  # two ticks of growth at 1000 MiB/s: still at the new maximum
    assert _held(sim) == 8
    assert httpx.delete(sim.url + LEAK_PATH, timeout=5).json()["released_mib"] == 8


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"rate_mib_per_min": True}, "body.rate_mib_per_min"),
        ({"rate_mib_per_min": "60"}, "body.rate_mib_per_min"),
        ({"rate_mib_per_min": 1.0, "max_mib": True}, "body.max_mib"),
        ({"rate_mib_per_min": 1.0, "max_mib": 8.0}, "body.max_mib"),
        ({"rate_mib_per_min": 1.0, "max_mib": "8"}, "body.max_mib"),
    ],
)
def test_leak_numbers_are_strict(sim: Sim, body: dict[str, object], param: str) -> None:
    error = _api_error(_put(sim, body), 400)
    assert (error["type"], error["param"]) == ("BadRequestError", param)
    assert httpx.get(sim.url + LEAK_PATH, timeout=5).json()["active"] is False


def test_fault_numbers_are_strict(sim: Sim) -> None:
    for body, param in (
        ({"kind": FaultKind.THROTTLE, "factor": True}, "body.factor"),
        ({"kind": FaultKind.XID, "xid": True}, "body.xid"),
    ):
        resp = httpx.post(sim.url + FAULTS_PATH, json=body, timeout=5)
        assert _api_error(resp, 400)["param"] == param
    assert httpx.get(sim.url + FAULTS_PATH, timeout=5).json()["engine"] == "running"


def test_an_unknown_fault_is_a_404(sim: Sim) -> None:
    error = _api_error(httpx.delete(f"{sim.url}{FAULTS_PATH}/nonexistent", timeout=5), 404)
    assert error["type"] == "NotFoundError" and "nonexistent" in error["message"]
    fault = sim.fault(kind=FaultKind.THROTTLE, factor=2.0, id="slow")
    assert httpx.delete(f"{sim.url}{FAULTS_PATH}/{fault['id']}", timeout=5).status_code == 200
    # Cleared once: a second DELETE finds nothing (the harness's revert takes 404 as done).
    _api_error(httpx.delete(f"{sim.url}{FAULTS_PATH}/{fault['id']}", timeout=5), 404)
    assert httpx.delete(sim.url + FAULTS_PATH, timeout=5).status_code == 200  # all: none left


def test_every_admin_4xx_has_the_api_shape(sim: Sim) -> None:
    huge = b'{"rate_mib_per_min": ' + b"9" * 5000 + b"}"
    headers = {"content-type": "application/json"}
    resp = httpx.put(sim.url + LEAK_PATH, content=huge, headers=headers, timeout=10)
    assert "4300" in _api_error(resp, 400)["message"]  # Python's limit on integer digits
    resp = httpx.put(sim.url + LEAK_PATH, content=b'{"rate_mib_per_min": 1e400}', timeout=10)
    assert _api_error(resp, 400)["param"] == "body.rate_mib_per_min"
    resp = httpx.put(sim.url + LEAK_PATH, content=b"\xff\xfe", headers=headers, timeout=10)
    _api_error(resp, 400)
    resp = httpx.put(sim.url + LEAK_PATH, content=b'{"rate_mib_per_min": ', timeout=10)
    assert _api_error(resp, 400)["message"].startswith("1 validation error")
    _api_error(_put(sim, {"rate_mib_per_min": 1.0, "extra": 1}), 400)
    _api_error(_put(sim, {}), 400)
    _api_error(httpx.post(sim.url + LEAK_PATH, json={}, timeout=5), 405)
    assert _api_error(httpx.get(sim.url + "/admin/nothing", timeout=5), 404)["type"] == (
        "NotFoundError"
    )
    assert _api_error(httpx.get(sim.url + "/admin", timeout=5), 404)["type"] == "NotFoundError"
    # vLLM's own routes keep FastAPI's shape, as real vLLM answers (docs/real-vllm.md).
    resp = httpx.post(sim.url + "/v1/completions", content=huge, headers=headers, timeout=10)
    assert resp.status_code == 400 and list(resp.json()) == ["detail"]
    assert httpx.get(sim.url + "/nothing", timeout=5).json() == {"detail": "Not Found"}

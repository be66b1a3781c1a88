"""No 500 for a client's mistake: the agent runtime answers a malformed request with a 4xx
naming the field, stays up, and bounds what one request can make it do (issue 15, point 6).

One stack (redis-server, an llmsim that also serves the canary's model name, the
tool server, the runtime) serves the whole module; Hypothesis draws bodies from
the runtime's own OpenAPI document and breaks them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from procs import Proc, Procs, dead_url
from tests.malformed import FUZZ_SETTINGS, Raw, encode, nudged, request_bodies, send, well_shaped

from faultday_refstack.agent.config import MAX_STEPS

TIMEOUT = 10.0  # the default policy's request timeout (6 s) and the gateway's hard stop, plus room


@dataclass
class Runtime:
    agent: Proc
    url: str
    openapi: dict[str, Any]


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    procs = Procs(tmp_path_factory.mktemp("agent-malformed"))
    try:
        _, redis_url = procs.redis()
        # One simulator answers both the primary's and the canary's model name.
        _, llm = procs.llmsim("sim-primary", "--served-model-name", "sim-primary-v2")
        _, backup = procs.llmsim("sim-backup")
        _, tools = procs.tools()
        urls = {
            "redis": redis_url,
            "llm-primary": llm,
            "llm-backup": backup,
            "llm-canary": llm,
            "embedder": dead_url(),
            "qdrant": dead_url(),
            "tools": tools,
        }
        agent, url = procs.agent(urls=urls)
        openapi = httpx.get(f"{url}/openapi.json", timeout=5).json()
        yield Runtime(agent, url, openapi)
    finally:
        procs.close()


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client() as client:
        yield client


def post(rt: Runtime, path: str, body: bytes) -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.post(f"{rt.url}{path}", content=body, headers=headers, timeout=TIMEOUT)


def task(**fields: Any) -> bytes:
    base = {"agent": "report", "goal": "g", "idempotency_key": f"k-{time.monotonic_ns()}"}
    return encode({**base, **fields})


def _locs(resp: httpx.Response) -> list[list[object]]:
    return [e["loc"] for e in resp.json()["detail"]]


# --- the cases the issue lists -------------------------------------------------------------------
@pytest.mark.parametrize("share", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_canary_share_not_finite_is_422_naming_the_field(runtime: Runtime, share: str) -> None:
    resp = post(runtime, "/admin/canary", f'{{"share": {share}}}'.encode())
    assert resp.status_code == 422, resp.text
    assert _locs(resp) == [["body", "share"]]
    assert httpx.get(f"{runtime.url}/admin/canary", timeout=5).json()["share"] == 0.0


def test_task_steps_are_bounded_and_the_limit_is_stated(runtime: Runtime) -> None:
    step = {"tool": "search_docs", "args": {"query": "x"}}
    resp = post(runtime, "/v1/tasks", task(steps=[step] * 10_000))
    assert resp.status_code == 422, resp.text
    assert _locs(resp) == [["body", "steps"]]
    assert f"at most {MAX_STEPS} items" in resp.json()["detail"][0]["msg"]
    assert post(runtime, "/v1/tasks", task(steps=[step] * MAX_STEPS)).status_code == 202


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"priority": Raw("NaN")}, ["body", "priority"]),
        ({"steps": [{"tool": "query_report", "args": {"x": Raw("NaN")}}]}, ["body", "steps", 0]),
        ({"steps": [{"tool": "query_report", "args": {"x": "s" * 100_000}}]}, ["body", "steps", 0]),
        ({"steps": [{"tool": "t" * 1000}]}, ["body", "steps", 0, "tool"]),
        ({"agent": "a" * 100_000}, ["body", "agent"]),
    ],
)
def test_task_fields_that_would_poison_or_occupy_the_stack_are_422(
    runtime: Runtime, fields: dict[str, Any], loc: list[object]
) -> None:
    resp = post(runtime, "/v1/tasks", task(**fields))
    assert resp.status_code == 422, resp.text
    assert any(found[: len(loc)] == loc for found in _locs(resp)), resp.text
    assert len(resp.content) < 10_000  # the error does not echo a huge input back


def test_chat_nan_and_deep_json_are_4xx(runtime: Runtime) -> None:
    for body in (
        b'{"session_id": NaN, "message": "x"}',
        b'{"session_id": "s", "message": "x", "rag": NaN}',
        b'{"session_id": "s", "message": "x", "rag": ' + b"[" * 900 + b"]" * 900 + b"}",
        b"[" * 100_000 + b"]" * 100_000,
    ):
        resp = post(runtime, "/v1/chat", body)
        assert 400 <= resp.status_code < 500, (body[:60], resp.text)


# --- the property: any malformed body ------------------------------------------------------------
def _body_schema(rt: Runtime, path: str) -> dict[str, Any]:
    op = rt.openapi["paths"][path]["post"]
    return op["requestBody"]["content"]["application/json"]["schema"]  # type: ignore[no-any-return]


TEXT = well_shaped({"type": "string", "minLength": 1, "maxLength": 40})
STEP = st.fixed_dictionaries(
    {"tool": st.sampled_from(["search_docs", "query_report", "send_message", "update_record"])},
    optional={"args": st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=3)},
)
PINS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "/v1/chat": {"session_id": TEXT, "message": TEXT, "rag": st.booleans()},
    "/v1/tasks": {
        "agent": st.sampled_from(["report", "ops", "planner"]),
        "goal": TEXT,
        "idempotency_key": TEXT,
        "steps": st.lists(STEP, max_size=3) | st.none(),
    },
    "/admin/canary": {"share": st.floats(0, 1)},
}


def _check(rt: Runtime, what: str, status: int, seconds: float, head: bytes) -> None:
    event(f"HTTP {status}")  # `pytest --hypothesis-show-statistics` shows how many of each
    assert status < 500, f"{what}: {status} {head!r}"
    assert seconds < TIMEOUT, f"{what}: {seconds:.1f}s"
    assert rt.agent.alive(), f"the runtime died on {what}: {rt.agent.log.read_text()[-2000:]}"


@pytest.mark.parametrize("path", sorted(PINS))
@FUZZ_SETTINGS
@given(data=st.data())
def test_malformed_requests_never_5xx(
    runtime: Runtime, http: httpx.Client, path: str, data: st.DataObject
) -> None:
    shape = nudged(well_shaped(_body_schema(runtime, path), runtime.openapi), PINS[path])
    body = data.draw(request_bodies(shape), label="body")
    a = send(http, "POST", f"{runtime.url}{path}", body, timeout=TIMEOUT)
    _check(runtime, path, a.status, a.seconds, a.head)


@FUZZ_SETTINGS
@given(task_id=st.text(max_size=300) | st.sampled_from(["\ud800", "%", "..", "a/b", "x" * 5000]))
def test_task_ids_never_5xx(runtime: Runtime, http: httpx.Client, task_id: str) -> None:
    quoted = quote(task_id.encode("utf-8", "surrogatepass"), safe="")
    a = send(http, "GET", f"{runtime.url}/v1/tasks/{quoted}", None, timeout=TIMEOUT)
    _check(runtime, "GET /v1/tasks/{id}", a.status, a.seconds, a.head)


def test_still_serving_and_no_traceback(runtime: Runtime) -> None:
    """Runs last in the module: the fuzzing broke nothing, in a request or in a task worker."""
    assert httpx.get(f"{runtime.url}/health", timeout=5).status_code == 200
    ok = post(runtime, "/v1/chat", json.dumps({"session_id": "s", "message": "hi"}).encode())
    assert ok.status_code == 200, ok.text
    time.sleep(1.0)  # the last tasks' first steps
    log = runtime.agent.log.read_text(errors="replace")
    assert "Traceback" not in log, log[log.find("Traceback") - 200 :][:3000]

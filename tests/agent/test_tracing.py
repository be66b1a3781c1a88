"""Spans from every hop: the agent, the LLM simulators and the tool server export OTLP to a
receiver the test runs, in the trace of the caller's ``traceparent`` (issue 26)."""

from __future__ import annotations

import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from procs import Procs, dead_url
from tests.refstack.otlp import Got, Receiver, ancestors, receiver

from conftest import Stack

pytestmark = pytest.mark.timeout(120)


def traceparent() -> tuple[str, str, str]:
    """(header, trace id, the caller's span id): what a load generator sends."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def one(spans: list[Got], name: str, service: str = "agent") -> Got:
    found = [s for s in spans if s.name == name and s.service == service]
    assert len(found) == 1, (name, service, [(s.service, s.name) for s in spans])
    return found[0]


def named(spans: list[Got], name: str, service: str = "agent") -> list[Got]:
    return [s for s in spans if s.name == name and s.service == service]


def has(trace_id: str, *wanted: tuple[str, str]) -> object:
    """A wait condition: the trace holds a span of each (service, name)."""

    def done(got: list[Got]) -> bool:
        seen = {(s.service, s.name) for s in got if s.trace_id == trace_id}
        return all(w in seen for w in wanted)

    return done


def assert_one_tree(spans: list[Got], root_parent: str) -> Got:
    """Every span's parent is in the trace, but the root's: the caller's span. Returns root."""
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if s.parent_id not in ids]
    assert [(r.service, r.name, r.parent_id) for r in roots] == [
        ("agent", roots[0].name, root_parent)
    ], roots
    return roots[0]


@pytest.fixture
def traced(procs: Procs) -> Iterator[tuple[Receiver, Stack]]:
    pytest.importorskip("faultday_refstack.llmsim")
    with receiver() as rx:
        r, r_url = procs.redis()
        pr, pr_url = procs.llmsim(
            "sim-primary", "--keep-alive-on-engine-death", env=rx.env("llm-primary")
        )
        bk, bk_url = procs.llmsim("sim-backup", env=rx.env("llm-backup"))
        tl, tl_url = procs.tools(env=rx.env("tools"))
        yield rx, Stack(procs, r, r_url, pr, pr_url, bk, bk_url, tl, tl_url)


def chat(url: str, header: str, *, session: str = "t1", rag: bool = False) -> httpx.Response:
    body = {"session_id": session, "message": "what is the refund policy", "rag": rag}
    return httpx.post(f"{url}/v1/chat", json=body, headers={"traceparent": header}, timeout=30)


def test_chat_is_one_tree_from_the_callers_span_to_the_llm_request(
    traced: tuple[Receiver, Stack],
) -> None:
    rx, stack = traced
    _, url = stack.procs.agent(urls=stack.urls(), env=rx.env("agent"), traces=False)
    header, trace_id, caller = traceparent()
    r = chat(url, header, rag=True)  # the embedder and qdrant URLs are closed ports
    assert r.status_code == 200, r.text
    assert r.json()["trace_id"] == trace_id
    rx.wait(has(trace_id, ("agent", "POST /v1/chat"), ("llm-primary", "llm_request")))
    spans = rx.trace(trace_id)
    root = assert_one_tree(spans, caller)
    assert (root.name, root.kind) == ("POST /v1/chat", "SERVER")
    assert root.attrs["http.response.status_code"] == 200
    assert root.attrs["faultday.degraded"] is True
    assert root.attrs["faultday.degraded_reasons"] == ["retrieval_unavailable"]
    assert root.attrs["gen_ai.response.model"] == "sim-primary"

    llm = one(spans, "llm_request", "llm-primary")
    attempt, call = ancestors(llm, spans)[:2]
    assert (attempt.name, attempt.kind) == ("llm-primary chat attempt", "CLIENT")
    assert attempt.attrs["peer.service"] == "llm-primary"
    assert attempt.attrs["retry.attempt"] == 1 and attempt.attrs["retry.backoff_s"] == 0
    assert attempt.attrs["breaker.state"] == "closed"
    assert attempt.attrs["gen_ai.request.model"] == "sim-primary"
    assert attempt.attrs["gen_ai.response.model"] == "sim-primary"
    assert (
        attempt.attrs["gen_ai.usage.completion_tokens"]
        == llm.attrs["gen_ai.usage.completion_tokens"]
    )
    assert (call.name, call.parent_id) == ("llm-primary chat", root.span_id)
    assert call.attrs["faultday.result"] == "ok" and call.attrs["faultday.attempts"] == 1
    assert llm.kind == "SERVER" and llm.status == "UNSET"
    assert llm.resource["vllm.instrumenting_module_name"] == "vllm.llm_engine"

    retrieval = one(spans, "retrieval")
    assert retrieval.status == "ERROR" and retrieval.attrs["retrieval.hits"] == 0
    embeds = named(spans, "embedder embed attempt")  # a closed port is worth a retry
    assert embeds and all(e.kind == "CLIENT" and e.status == "ERROR" for e in embeds)
    assert {e.attrs["peer.service"] for e in embeds} == {"triton"}
    assert ancestors(embeds[0], spans)[1] == retrieval
    hop = one(spans, "fallback retrieval -> no_context")
    assert hop.attrs["fallback.from"] == "rag" and hop.attrs["fallback.to"] == "no_context"
    assert "embedder" in str(hop.attrs["fallback.reason"])

    history = one(spans, "redis history attempt")
    assert history.kind == "CLIENT" and history.attrs["peer.service"] == "redis"
    assert history.attrs["cache.hit"] is False  # a new session
    header2, trace2, _ = traceparent()
    assert chat(url, header2).status_code == 200
    rx.wait(has(trace2, ("agent", "redis history attempt")))
    assert one(rx.trace(trace2), "redis history attempt").attrs["cache.hit"] is True


def test_primary_failure_shows_each_retry_the_fallback_and_the_open_breaker(
    traced: tuple[Receiver, Stack],
) -> None:
    rx, stack = traced
    _, url = stack.procs.agent(urls=stack.urls(), env=rx.env("agent"), traces=False)
    httpx.post(f"{stack.primary_url}/admin/faults", json={"kind": "xid", "xid": 79}, timeout=5)
    header, trace_id, caller = traceparent()
    r = chat(url, header)
    assert r.status_code == 200 and r.json()["model"] == "sim-backup", r.text
    rx.wait(has(trace_id, ("agent", "POST /v1/chat"), ("llm-backup", "llm_request")))
    spans = rx.trace(trace_id)
    assert_one_tree(spans, caller)

    # The default policy: 3 attempts with backoff, each one its own CLIENT span, in error.
    attempts = sorted(
        named(spans, "llm-primary chat attempt"), key=lambda s: s.attrs["retry.attempt"]
    )
    assert [a.attrs["retry.attempt"] for a in attempts] == [1, 2, 3]
    assert all(a.status == "ERROR" and "HTTP 500" in a.message for a in attempts)
    assert attempts[0].attrs["retry.backoff_s"] == 0
    assert all(a.attrs["retry.backoff_s"] > 0.02 for a in attempts[1:])  # backoff_initial 50ms
    call = one(spans, "llm-primary chat")
    assert call.status == "ERROR" and call.attrs["faultday.result"] == "error_retryable"
    assert call.attrs["faultday.attempts"] == 3
    assert not named(spans, "llm_request", "llm-primary")  # a dead engine writes no span
    hop = one(spans, "fallback llm -> backup")
    assert (hop.attrs["fallback.from"], hop.attrs["fallback.to"]) == ("primary", "backup")
    assert "llm-primary" in str(hop.attrs["fallback.reason"])
    backup = one(spans, "llm_request", "llm-backup")
    assert ancestors(backup, spans)[0].name == "llm-backup chat attempt"

    # Three failures opened the breaker: the next request is refused without a call.
    header2, trace2, _ = traceparent()
    assert chat(url, header2).json()["model"] == "sim-backup"
    rx.wait(has(trace2, ("agent", "POST /v1/chat"), ("llm-backup", "llm_request")))
    spans2 = rx.trace(trace2)
    refused = one(spans2, "llm-primary breaker open")
    assert refused.status == "ERROR" and refused.attrs["breaker.state"] == "opened"
    assert one(spans2, "llm-primary chat").attrs["faultday.result"] == "breaker_open"
    assert not named(spans2, "llm-primary chat attempt")


def test_task_tool_call_reaches_the_tool_servers_span(traced: tuple[Receiver, Stack]) -> None:
    rx, stack = traced
    _, url = stack.procs.agent(urls=stack.urls(), env=rx.env("agent"), traces=False)
    header, trace_id, caller = traceparent()
    body = {
        "agent": "report",
        "goal": "count customers",
        "idempotency_key": "trace-1",
        "steps": [{"tool": "query_report", "args": {"sql": "SELECT count(*) FROM customers"}}],
    }
    r = httpx.post(f"{url}/v1/tasks", json=body, headers={"traceparent": header}, timeout=10)
    assert r.status_code == 202, r.text
    rx.wait(
        has(trace_id, ("tools", "tools/call query_report"), ("agent", "task report")), timeout=30
    )
    spans = rx.trace(trace_id)
    assert_one_tree(spans, caller)
    task = one(spans, "task report")
    assert ancestors(task, spans)[0].name == "POST /v1/tasks"
    attempt = one(spans, "tools query_report attempt")
    assert attempt.kind == "CLIENT" and attempt.attrs["gen_ai.tool.name"] == "query_report"
    # The MCP SDK's own span on the tool server, parented through the request's _meta.
    server = one(spans, "tools/call query_report", "tools")
    assert server.kind == "SERVER" and server.parent_id == attempt.span_id
    assert server.attrs["gen_ai.tool.name"] == "query_report" and server.status == "UNSET"
    # The workers' queue polls (10 a second each, nearly all empty) are not traced: the
    # popped task runs in its submitter's trace, as above. A second of idle polling, then:
    time.sleep(1.0)
    assert not [s.name for s in rx.snapshot() if s.name.startswith("redis pop")]


def test_without_the_environment_nothing_is_exported_and_nothing_breaks(
    stack: Stack, tmp_path: Path
) -> None:
    with receiver() as rx:
        # Only the simulator is told where the receiver is: the agent is not, so it exports
        # nothing, and the simulator records nothing of a trace the agent did not sample.
        solo, sim_url = stack.procs.llmsim(
            "sim-solo", "--served-model-name", "sim-primary", env=rx.env("llm-solo")
        )
        urls = {**stack.urls(), "llm-primary": sim_url, "llm-backup": dead_url()}
        _, url = stack.procs.agent(urls=urls, traces=False)
        header, trace_id, _ = traceparent()
        r = chat(url, header)
        assert r.status_code == 200 and r.json()["model"] == "sim-primary", r.text
        assert r.json()["trace_id"] == trace_id  # ids still flow
        untraced = httpx.post(
            f"{url}/v1/chat", json={"session_id": "u", "message": "hi", "rag": False}, timeout=30
        )
        assert untraced.status_code == 200
        assert len(untraced.json()["trace_id"]) == 32 and int(untraced.json()["trace_id"], 16)
        assert not (tmp_path / "traces.jsonl").exists()
        solo.kill(signal.SIGTERM)  # a clean stop flushes whatever the simulator queued
        assert rx.posts == 0 and rx.snapshot() == []

"""Chat against a real local stack: redis-server, two llmsims, the tool server (issue 6)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import redis

from conftest import Stack

CHAT = {"session_id": "s1", "message": "hello there", "rag": False}


def chat(url: str, body: dict[str, object] | None = None, timeout: float = 30) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat", json=body or CHAT, timeout=timeout)


def metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        head = f"{name}{{{want}}}" if labels else name
        if line.startswith(head + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def spans(tmp: Path) -> list[dict[str, object]]:
    path = tmp / "traces.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_chat_answers_with_history_and_trace_id(stack: Stack) -> None:
    _, url = stack.procs.agent(urls=stack.urls())
    first = chat(url)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["model"] == "sim-primary"
    assert body["degraded"] is False and first.headers["x-faultday-degraded"] == "false"
    assert body["trace_id"] == first.headers["x-faultday-trace-id"] and len(body["trace_id"]) == 32
    chat(url)
    turns = redis.Redis.from_url(stack.redis_url).llen("fd:session:s1")
    assert turns == 4  # two user turns, two answers


def test_redis_down_chat_degrades_then_recovers_by_itself(stack: Stack) -> None:
    _, url = stack.procs.agent(urls=stack.urls())
    assert chat(url).json()["degraded"] is False
    port = int(stack.redis_url.rsplit(":", 1)[1].split("/")[0])
    stack.redis.kill()
    for _ in range(3):
        r = chat(url)
        assert r.status_code == 200, r.text
        assert r.json()["degraded_reasons"] == ["history_unavailable"]
        assert r.headers["x-faultday-degraded"] == "true"
        assert r.elapsed.total_seconds() < 6  # within the request budget of the default policy
    stack.procs.redis(port)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if chat(url).json()["degraded"] is False:
            break
        time.sleep(0.5)
    else:
        pytest.fail("chat did not recover after Redis came back")
    assert metric(url, "faultday_agent_degraded_total", reason="history_unavailable") >= 3


def test_retrieval_down_answers_without_context(stack: Stack, tmp_path: Path) -> None:
    _, url = stack.procs.agent(urls=stack.urls())  # embedder and qdrant URLs are closed ports
    r = chat(url, {"session_id": "s2", "message": "what is the refund policy", "rag": True})
    assert r.status_code == 200
    assert r.json()["degraded_reasons"] == ["retrieval_unavailable"]
    assert r.json()["model"] == "sim-primary"
    time.sleep(0.6)  # the span exporter batches every 250 ms
    names = [s["name"] for s in spans(tmp_path)]
    assert "embedder embed" in names and "fallback retrieval -> no_context" in names


def test_gpu_loss_backup_answers_and_breaker_opens(stack: Stack, tmp_path: Path) -> None:
    _, url = stack.procs.agent(urls=stack.urls())
    assert chat(url).json()["model"] == "sim-primary"
    httpx.post(f"{stack.primary_url}/admin/faults", json={"kind": "xid", "xid": 79}, timeout=5)
    for _ in range(6):
        r = chat(url)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "sim-backup"
        assert r.json()["degraded_reasons"] == ["llm_backup"]
        assert r.elapsed.total_seconds() < 6  # timeouts.request of the default policy
    health = httpx.get(f"{url}/health", timeout=5).json()
    assert health["breakers"]["llm-primary"] == "opened"
    assert metric(url, "faultday_agent_breaker_state", dependency="llm-primary") == 2
    reached = metric(url, "faultday_agent_dependency_attempts_total", dependency="llm-primary")
    # 1 good call, then threshold (3) failures open the breaker; nothing reaches it after.
    assert reached == 4, reached
    time.sleep(0.6)
    results = [
        s["attributes"].get("faultday.result")
        for s in spans(tmp_path)  # type: ignore[union-attr]
        if s["name"] == "llm-primary chat"
    ]
    assert results[-1] == "breaker_open"
    assert any(s["name"] == "fallback llm -> backup" for s in spans(tmp_path))


def test_gpu_loss_naive_policy_retry_storm(stack: Stack, tmp_path: Path) -> None:
    _, url = stack.procs.agent(urls=stack.urls(), policy="naive")
    httpx.post(f"{stack.primary_url}/admin/faults", json={"kind": "xid", "xid": 79}, timeout=5)
    for _ in range(6):
        r = chat(url)
        assert r.status_code == 503  # no fallback: the loss reaches the user
    # 5 attempts each, no breaker: every request hammers the dead replica.
    assert metric(url, "faultday_agent_retries_total", dependency="llm-primary") == 6 * 4
    reached = metric(url, "faultday_agent_dependency_attempts_total", dependency="llm-primary")
    assert reached == 6 * 5
    assert metric(url, "faultday_agent_breaker_state", dependency="llm-primary") == 0

"""Agent tasks against the real local stack: checkpoints, resume after SIGKILL, least privilege."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest
import redis

from conftest import Stack

REPORT_STEPS = [
    {"tool": "query_report", "args": {"sql": "SELECT count(*) FROM customers"}},
    {"tool": "send_message", "args": {"to": "ops@example.com", "subject": "r", "body": "b"}},
]


def submit(url: str, key: str, **kw: object) -> httpx.Response:
    body = {"agent": "report", "goal": f"report {key}", "idempotency_key": key, **kw}
    return httpx.post(f"{url}/v1/tasks", json=body, timeout=10)


def get(url: str, task_id: str) -> dict[str, object]:
    return httpx.get(f"{url}/v1/tasks/{task_id}", timeout=10).json()  # type: ignore[no-any-return]


def wait_done(url: str, ids: list[str], timeout: float) -> list[dict[str, object]]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        tasks = [get(url, i) for i in ids]
        if all(t["status"] in ("done", "failed") for t in tasks):
            return tasks
        time.sleep(0.3)
    states = [(t["id"], t["status"], t["step"]) for t in tasks]
    pytest.fail(f"tasks not finished in {timeout}s: {states}")


def test_report_agent_update_record_is_denied_and_audited(stack: Stack, tmp_path: Path) -> None:
    _, url = stack.procs.agent(urls=stack.urls())
    steps = [{"tool": "update_record", "args": {"record_id": "r1", "fields": {"a": "b"}}}]
    r = submit(url, "deny-1", steps=steps)
    assert r.status_code == 202, r.text
    (task,) = wait_done(url, [r.json()["id"]], 30)
    assert task["status"] == "done"
    assert "tool_denied:update_record" in task["degraded_reasons"]  # type: ignore[operator]
    audit = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    denied = [a for a in audit if a["decision"] == "denied"]
    assert [(a["agent"], a["tool"], a["task"]) for a in denied] == [
        ("report", "update_record", task["id"])
    ]
    stream = redis.Redis.from_url(stack.redis_url).xrange("fd:audit")
    assert any(b'"decision":"denied"' in fields[b"entry"] for _, fields in stream)


def test_submit_is_idempotent(stack: Stack) -> None:
    _, url = stack.procs.agent(urls=stack.urls())
    a = submit(url, "same-key", steps=REPORT_STEPS[:1])
    b = submit(url, "same-key", steps=REPORT_STEPS[:1])
    assert (a.status_code, b.status_code) == (202, 200)
    assert a.json()["id"] == b.json()["id"]


def test_sigkill_mid_20_tasks_all_complete_no_duplicate_message(stack: Stack) -> None:
    agent, url = stack.procs.agent(urls=stack.urls(), name="agent-a")
    port = int(url.rsplit(":", 1)[1])
    # Slow tools so the kill lands while tasks are between their two steps.
    httpx.put(f"{stack.tools_url}/admin/faults/slow", json={"latency_s": 0.4}, timeout=5)
    ids = [submit(url, f"kill-{n}", steps=REPORT_STEPS).json()["id"] for n in range(20)]
    r = redis.Redis.from_url(stack.redis_url)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        states = [json.loads(r.get(f"fd:task:{i}") or "{}") for i in ids]
        mid = [s for s in states if s.get("step") == 1 and s.get("status") == "acting"]
        if len(mid) >= 2:
            break
        time.sleep(0.05)
    else:
        pytest.fail("no task reached the middle of its plan")
    agent.kill(signal.SIGKILL)
    unfinished = r.scard("fd:tasks:open")
    assert unfinished > 0
    _, url = stack.procs.agent(urls=stack.urls(), port=port, name="agent-b")
    tasks = wait_done(url, ids, 90)
    assert [t["status"] for t in tasks] == ["done"] * 20
    for t in tasks:
        sent = [o for o in t["observations"] if o["tool"] == "send_message"]  # type: ignore[union-attr]
        assert len(sent) == 1 and sent[0]["ok"], t
    outbox = httpx.get(f"{stack.tools_url}/admin/outbox", timeout=5).json()
    keys = [m["idempotency_key"] for m in outbox["messages"]]
    assert outbox["count"] == 20 and len(set(keys)) == 20  # one side effect per task, no dupes
    health = httpx.get(f"{url}/health", timeout=5).json()
    assert health["resumed_tasks"] == unfinished


def test_planner_splits_goal_into_subtasks(stack: Stack) -> None:
    _, url = stack.procs.agent(urls=stack.urls())
    r = httpx.post(
        f"{url}/v1/tasks",
        json={
            "agent": "planner",
            "goal": "revenue by region; incidents by severity",
            "idempotency_key": "plan-1",
        },
        timeout=10,
    )
    (parent,) = wait_done(url, [r.json()["id"]], 60)
    assert parent["status"] == "done"
    children = parent["children"]
    assert isinstance(children, list) and len(children) >= 1
    for c in wait_done(url, children, 30):
        assert c["parent"] == parent["id"] and c["status"] == "done"


def test_scripted_cyclic_split_fails_over_after_the_bounded_wait(
    stack: Stack, tmp_path: Path
) -> None:
    """Two subtasks wait on each other: past timeouts.wait both go on, degraded; none hangs."""
    text = (Path(__file__).parents[2] / "stack" / "agent.yaml").read_text()
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        text.replace(
            "request: 6s, redis: 250ms,\n               embed: 1s, vector: 1s, wait: 30s",
            "request: 6s, redis: 250ms,\n               embed: 1s, vector: 1s, wait: 2s",
        )
    )
    assert cfg.read_text() != text
    _, url = stack.procs.agent(urls=stack.urls(), config=cfg)
    subtasks = [
        {"goal": "revenue by region", "agent": "report", "depends_on": [1]},
        {"goal": "incidents by severity", "agent": "report", "depends_on": [0]},
    ]
    r = httpx.post(
        f"{url}/v1/tasks",
        json={"agent": "planner", "goal": "g", "idempotency_key": "cycle-1", "subtasks": subtasks},
        timeout=10,
    )
    assert r.status_code == 202, r.text
    (parent,) = wait_done(url, [r.json()["id"]], 60)
    children = wait_done(url, parent["children"], 30)  # type: ignore[arg-type]
    assert [c["depends_on"] for c in children] == [[children[1]["id"]], [children[0]["id"]]]
    for c in children:
        assert c["status"] == "done"
        assert "dependency_timed_out" in c["degraded_reasons"]  # type: ignore[operator]
    assert parent["status"] == "done"

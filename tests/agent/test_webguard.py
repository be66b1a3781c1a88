"""The agent runtime refuses what a web page could send (issue 16.2); its clients still pass."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from procs import Procs, dead_url
from tests.llmsim.test_gpu_injectors import Ctx, cycle
from tests.webguard_http import ATTACKS, IDS, Attack, assert_refused, attacks_for

from faultday.core.targets import Target, TargetKind
from faultday_refstack.agent.obs import PREFIX

CHAT = {"session_id": "web", "message": "what is the refund policy?", "rag": False}
TASK = {"agent": "report", "goal": "revenue by region", "idempotency_key": "web-task-1"}


@dataclass(frozen=True)
class Agent:
    url: str


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """A runtime with a canary (so /admin/canary takes a share), as tests/agent start it."""
    procs = Procs(tmp_path_factory.mktemp("agent-webguard"))
    try:
        _, redis_url = procs.redis()
        _, primary = procs.llmsim("sim-primary")
        _, canary = procs.llmsim("sim-primary-v2", "--version", "v2")
        _, tools = procs.tools()
        urls = {
            "redis": redis_url,
            "llm-primary": primary,
            "llm-backup": primary,
            "llm-canary": canary,
            "embedder": dead_url(),
            "qdrant": dead_url(),
            "tools": tools,
        }
        yield Agent(procs.agent(urls=urls)[1])
    finally:
        procs.close()


def share(agent: Agent) -> float:
    return float(httpx.get(f"{agent.url}/admin/canary", timeout=5).json()["share"])


def served(agent: Agent) -> float:
    """Requests the runtime's routes answered (its own counter; refusals never reach it)."""
    text = httpx.get(f"{agent.url}/metrics", timeout=5).text
    rows = [line for line in text.splitlines() if line.startswith(f"{PREFIX}_requests_total{{")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in rows if "/metrics" not in line)


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_admin_canary_refuses_every_browser_shape(agent: Agent, attack: Attack) -> None:
    before = served(agent)
    assert_refused(f"{agent.url}/admin/canary", "POST", {"share": 1.0}, attack)
    if attack in attacks_for("GET") and attack.content_type == "application/json":
        assert_refused(f"{agent.url}/admin/canary", "GET", None, attack)
    assert served(agent) == before
    assert share(agent) == 0.0  # (a request of its own: counted after the comparison)


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_chat_and_tasks_refuse_every_browser_shape(agent: Agent, attack: Attack) -> None:
    """On a loopback-bound runtime the data plane gets all four rules (webguard docs)."""
    before = served(agent)
    assert_refused(f"{agent.url}/v1/chat", "POST", CHAT, attack)
    assert_refused(f"{agent.url}/v1/tasks", "POST", TASK, attack)
    if attack in attacks_for("GET") and attack.content_type == "application/json":
        assert_refused(f"{agent.url}/v1/tasks/0123456789abcdef", "GET", None, attack)
    assert served(agent) == before


def test_rollout_injector_and_json_clients_pass(agent: Agent, tmp_path: Path) -> None:
    target = Target(name="agent", kind=TargetKind.COMPONENT, component_type="agent", url=agent.url)
    ctx = Ctx(tmp_path, {"agent": target}, lambda _: target)
    inj, revert = cycle("model_rollout", ctx, target, {"share": 0.25})
    assert share(agent) == 0.25
    inj.revert(ctx, revert)
    assert share(agent) == 0.0
    chat = httpx.post(f"{agent.url}/v1/chat", json=CHAT, timeout=15)
    assert chat.status_code == 200, chat.text
    task = httpx.post(f"{agent.url}/v1/tasks", json=TASK, timeout=15)
    assert task.status_code in (200, 202), task.text
    got = httpx.get(f"{agent.url}/v1/tasks/{task.json()['id']}", timeout=5)
    assert got.status_code == 200

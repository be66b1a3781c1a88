"""The canary split: a seeded, deterministic share of chat requests to a second model version."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from pydantic import ValidationError
from test_chat import metric

from conftest import Stack
from faultday_refstack.agent.canary import CanarySplit, draw
from faultday_refstack.agent.config import AgentConfig
from faultday_wire.llm import Canary, CanaryKey

REPO = Path(__file__).resolve().parents[2]


def test_the_split_takes_its_share_deterministically() -> None:
    split = CanarySplit(Canary(model="v2", share=0.05))
    keys = [f"req-{i}" for i in range(20_000)]
    routed = [k for k in keys if split.routes(k)]
    assert 0.045 <= len(routed) / len(keys) <= 0.055
    assert routed == [k for k in keys if split.routes(k)]  # same keys, same side
    # A larger share keeps every key the smaller one routed (a rollout only widens).
    split.set_share(0.2)
    assert set(routed) <= {k for k in keys if split.routes(k)}
    assert split.set_share(0.0) == 0.2
    assert not any(split.routes(k) for k in keys[:1000])


def test_the_seed_changes_the_split_and_the_key_can_be_the_session() -> None:
    keys = [f"k{i}" for i in range(2000)]
    assert [draw(k, seed=0) for k in keys] != [draw(k, seed=1) for k in keys]
    sticky = CanarySplit(Canary(model="v2", share=0.5, key=CanaryKey.SESSION))
    assert sticky.key(session_id="s1", request_id="r1") == "s1"
    per_request = CanarySplit(Canary(model="v2", share=0.5))
    assert per_request.key(session_id="s1", request_id="r1") == "r1"
    with pytest.raises(ValueError, match="share"):
        per_request.set_share(1.5)


def test_config_refuses_unknown_keys_and_bad_shares() -> None:
    raw = yaml.safe_load((REPO / "stack" / "agent.yaml").read_text())
    assert AgentConfig.model_validate(raw).models.canary is not None
    for bad in ({"share": 1.5}, {"weight": 0.1}, {"key": "user"}):
        broken = {**raw, "models": {**raw["models"], "canary": {**raw["models"]["canary"], **bad}}}
        with pytest.raises(ValidationError):
            AgentConfig.model_validate(broken)


def test_admin_share_routes_chats_to_the_canary_and_counts_tokens(stack: Stack) -> None:
    _, canary_url = stack.procs.llmsim("sim-primary-v2", "--version", "v2")
    _, url = stack.procs.agent(urls={**stack.urls(), "llm-canary": canary_url})
    assert httpx.get(f"{url}/admin/canary", timeout=5).json()["share"] == 0.0

    def models(n: int) -> list[str]:
        out = []
        for i in range(n):
            body = {"session_id": f"s{i}", "message": "hello there", "rag": False}
            r = httpx.post(f"{url}/v1/chat", json=body, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] > 0
            out.append(r.json()["model"])
        return out

    assert set(models(10)) == {"sim-primary"}  # share 0: no canary
    r = httpx.post(f"{url}/admin/canary", json={"share": 0.5}, timeout=5)
    assert r.status_code == 200 and r.json()["previous"] == 0.0
    seen = models(40)
    assert 8 <= seen.count("sim-primary-v2") <= 32, seen
    assert set(seen) == {"sim-primary", "sim-primary-v2"}
    assert metric(url, "faultday_agent_model_requests_total", model="sim-primary-v2") == (
        seen.count("sim-primary-v2")
    )
    assert metric(url, "faultday_agent_completion_tokens_total", model="sim-primary-v2") > 0
    assert metric(url, "faultday_agent_canary_share") == 0.5
    assert httpx.post(f"{url}/admin/canary", json={"share": 0}, timeout=5).status_code == 200
    assert set(models(10)) == {"sim-primary"}
    assert httpx.post(f"{url}/admin/canary", json={"share": 2}, timeout=5).status_code == 422


def test_no_canary_address_means_no_canary(stack: Stack) -> None:
    _, url = stack.procs.agent(urls=stack.urls())
    assert httpx.get(f"{url}/admin/canary", timeout=5).json()["configured"] is False
    assert httpx.post(f"{url}/admin/canary", json={"share": 0.1}, timeout=5).status_code == 409

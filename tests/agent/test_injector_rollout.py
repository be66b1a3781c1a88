"""model_rollout against a real agent runtime: sets the canary share, reverts it, idempotently."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from conftest import Stack
from faultday.core.plugins import INJECTORS, Registry
from faultday.core.targets import Revert, Target, TargetKind
from faultday.errors import InjectionError
from faultday.injectors.base import Injector
from faultday.injectors.rollout import ModelRollout


class Ctx:
    run_dir = Path()
    live = True


def share(url: str) -> float:
    return float(httpx.get(f"{url}/admin/canary", timeout=5).json()["share"])


def test_rollout_sets_the_share_and_the_revert_restores_it(stack: Stack) -> None:
    _, canary_url = stack.procs.llmsim("sim-primary-v2", "--version", "v2")
    proc, url = stack.procs.agent(urls={**stack.urls(), "llm-canary": canary_url})
    target = Target("agent", TargetKind.COMPONENT, "agent", url=url, pid=proc.pid)
    inj = Registry[Injector](INJECTORS, "injector").get("model_rollout")()
    params = inj.parse({"share": 0.05})
    rev = inj.prepare(Ctx(), target, params, fault="canary")  # type: ignore[arg-type]
    assert share(url) == 0.0  # prepare changes nothing
    # Reverts are plain data: they survive the ledger's JSON round trip.
    rev = Revert.from_json(rev.to_json())
    inj.inject(Ctx(), target, params, rev)  # type: ignore[arg-type]
    assert share(url) == 0.05
    inj.revert(Ctx(), rev)  # type: ignore[arg-type]
    assert share(url) == 0.0
    inj.revert(Ctx(), rev)  # type: ignore[arg-type]  # idempotent
    assert share(url) == 0.0
    proc.kill()
    inj.revert(Ctx(), rev)  # type: ignore[arg-type]  # agent gone: its share went with it


def test_rollout_refuses_an_agent_without_a_canary(stack: Stack) -> None:
    proc, url = stack.procs.agent(urls=stack.urls())
    target = Target("agent", TargetKind.COMPONENT, "agent", url=url, pid=proc.pid)
    inj = ModelRollout()
    with pytest.raises(InjectionError, match="no canary configured"):
        inj.prepare(Ctx(), target, inj.parse({"share": 0.05}), fault="canary")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="greater than 0"):  # a rollout of 0 % is no rollout
        inj.parse({"share": 0})

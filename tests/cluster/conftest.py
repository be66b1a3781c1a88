"""Fixtures for the cluster tests: no cluster can run here; API stand-in (kube_standin.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from kube_standin import KubeStandIn

from faultday.cluster.config import ClusterAccess, KubernetesConfig
from faultday.cluster.kubernetes import KubernetesStack
from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile, load_profile
from faultday.core.targets import Revert, Target
from faultday.injectors.base import Injector

REPO = Path(__file__).resolve().parents[2]
NS = "gameday"
PART_OF = "faultday-local"
LLM_LABELS = {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/name": "llm-primary"}


@pytest.fixture
def standin() -> Iterator[KubeStandIn]:
    s = KubeStandIn().start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def profile() -> StackProfile:
    return load_profile("local", base_dir=REPO)


def k8s_config(standin: KubeStandIn, **kw: object) -> KubernetesConfig:
    base: dict[str, object] = {
        "namespace": NS,
        "access": ClusterAccess(host=standin.url, request_timeout=5),
        "ready_timeout": "5s",
    }
    base.update(kw)
    return KubernetesConfig.model_validate(base)


@pytest.fixture
def k8s_stack(
    standin: KubeStandIn, profile: StackProfile, tmp_path: Path
) -> Iterator[KubernetesStack]:
    stack = KubernetesStack(
        profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path), config=k8s_config(standin)
    )
    try:
        yield stack
    finally:
        stack.cluster.close()


@dataclass
class Ctx:
    """The engine's FaultContext during a live run (it exposes ``stack`` the same way)."""

    run_dir: Path
    stack: object
    live: bool = True

    def target(self, name: str) -> Target:
        return self.stack.target(name)  # type: ignore[attr-defined,no-any-return]

    def restart(self, component: str, *, timeout: float) -> None:
        self.stack.restart(component, timeout=timeout)  # type: ignore[attr-defined]


def engine_inject(
    injector: Injector, ctx: Ctx, target: str, raw: dict[str, object], *, fault: str = "f1"
) -> Revert:
    """What the engine does (runner._inject): prepare → ledger → inject; on failure revert."""
    params = injector.parse(raw)  # type: ignore[arg-type]
    t = ctx.target(target)
    revert = injector.prepare(ctx, t, params, fault=fault)
    ledger = Ledger.in_dir(ctx.run_dir)
    ledger.add_revert(revert)
    try:
        injector.inject(ctx, t, params, revert)
    except Exception:
        injector.revert(ctx, revert)
        ledger.revert_done(revert, ok=True)
        raise
    return revert

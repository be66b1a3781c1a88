"""Every stack driver implements ``StackDriver``: members, signatures, and the optional
abilities it declares. No driver is started: these are contracts, not behaviour."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultday.cluster.config import ClusterAccess, KubernetesConfig
from faultday.cluster.docker import DockerConfig, DockerStack
from faultday.cluster.kubernetes import KubernetesStack
from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile, load_profile
from faultday.core.protocols import (
    ConfigurableDriver,
    DryRunnable,
    Interruptible,
    LoadHost,
    StackDriver,
)
from faultday.core.scenario import LoadSpec
from faultday.load.runner import LoadOptions
from faultday.stack.stack import Stack

REPO = Path(__file__).resolve().parents[2]
DRIVERS = ("process", "docker", "kubernetes")


@pytest.fixture(scope="module")
def profile() -> StackProfile:
    return load_profile("local", base_dir=REPO)


def _make(driver: str, profile: StackProfile, tmp: Path) -> StackDriver:
    ledger = Ledger.in_dir(tmp)
    if driver == "process":
        return Stack(profile, run_dir=tmp, ledger=ledger)
    if driver == "docker":
        # Port 9 (discard) on loopback: nothing is contacted until up().
        cfg = DockerConfig(base_url="tcp://127.0.0.1:9", timeout=1)
        return DockerStack(profile, run_dir=tmp, ledger=ledger, config=cfg)
    k8s = KubernetesConfig(namespace="gameday", access=ClusterAccess(host="http://127.0.0.1:9"))
    return KubernetesStack(profile, run_dir=tmp, ledger=ledger, config=k8s)


@pytest.fixture(params=DRIVERS)
def stack(
    request: pytest.FixtureRequest, profile: StackProfile, tmp_path: Path
) -> Iterator[StackDriver]:
    made = _make(request.param, profile, tmp_path)
    yield made
    if isinstance(made, KubernetesStack):
        made.cluster.close()


def _members(proto: type) -> list[str]:
    own = {k for k in vars(proto) if not k.startswith("_")}
    return sorted(own)


def _shape(fn: object) -> list[tuple[str, object, object, object]]:
    """Name, kind, default and annotation of every parameter but self, and the return."""
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    params = [p for p in sig.parameters.values() if p.name != "self"]
    out: list[tuple[str, object, object, object]] = [
        (p.name, p.kind, p.default, p.annotation) for p in params
    ]
    return [*out, ("return", None, None, sig.return_annotation)]


def test_every_driver_is_a_stack_driver(stack: StackDriver) -> None:
    assert isinstance(stack, StackDriver)
    assert stack.driver in DRIVERS
    assert isinstance(stack.run_dir, Path)


@pytest.mark.parametrize("member", _members(StackDriver))
@pytest.mark.parametrize("driver", DRIVERS)
def test_signatures_match_the_protocol(
    driver: str, member: str, profile: StackProfile, tmp_path: Path
) -> None:
    made = _make(driver, profile, tmp_path)
    want = getattr(StackDriver, member)
    if isinstance(want, property):
        assert not callable(getattr(made, member)), f"{driver}.{member} must be a value"
        return
    got = getattr(type(made), member)
    assert _shape(got) == _shape(want), f"{driver}.{member} drifted from StackDriver"


def test_optional_abilities_are_declared_per_driver(profile: StackProfile, tmp_path: Path) -> None:
    made = {d: _make(d, profile, tmp_path / d) for d in DRIVERS}
    # Only the process driver can cut a start-up short; only kubernetes runs the load itself
    # and lists the objects a run would touch.
    assert {d for d, s in made.items() if isinstance(s, Interruptible)} == {"process"}
    assert {d for d, s in made.items() if isinstance(s, LoadHost)} == {"kubernetes"}
    assert {d for d, s in made.items() if isinstance(s, DryRunnable)} == {"kubernetes"}
    # A settings file of their own (--driver-config): a property of the class.
    configurable = {d for d, s in made.items() if isinstance(type(s), ConfigurableDriver)}
    assert configurable == {"docker", "kubernetes"}


def test_a_driver_missing_a_member_is_not_a_stack_driver(
    profile: StackProfile, tmp_path: Path
) -> None:
    """The check can fail: a driver without ``pause`` does not pass for one."""

    class NoPause(Stack):
        pause = None  # type: ignore[assignment]

    broken = NoPause(profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path))
    good = Stack(profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path))
    assert isinstance(good, StackDriver)
    assert not isinstance(broken, StackDriver)


def _typed(process: Stack, docker: DockerStack, kubernetes: KubernetesStack) -> None:
    """Never called: mypy checks these assignments (``mypy tests/core/test_protocols.py``)."""
    drivers: list[StackDriver] = [process, docker, kubernetes]
    interruptible: Interruptible = process
    host: LoadHost[LoadSpec, LoadOptions] = kubernetes
    lister: DryRunnable = kubernetes
    configs: list[ConfigurableDriver] = [DockerStack, KubernetesStack]
    assert drivers and interruptible and host and lister and configs

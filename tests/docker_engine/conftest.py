"""Fixtures for the Docker tests: a real Docker Engine on this machine, faultday's image.

Without an engine (or without the image) every test here skips with the reason;
``make test-docker`` sets FAULTDAY_DOCKER_REQUIRED=1, which turns that into a
failure, so CI cannot pass by skipping.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.observed import recorder, write_summary

from faultday.cluster.docker_render import faultday_image

REPO = Path(__file__).resolve().parents[2]
REQUIRED_ENV = "FAULTDAY_DOCKER_REQUIRED"
# The vLLM image the docker-real profile names (`make image-vllm` builds that tag).
REAL_PROFILE = REPO / "src" / "faultday" / "stack" / "profiles" / "docker-real.yaml"
OBSERVED = pytest.StashKey[dict[str, dict[str, object]]]()
# What real vLLM did in its container, per test: printed at the end and kept with the
# CI logs (git-ignored), as tests/real does for the host process.
OBSERVED_FILE = REPO / "reports" / "docker-vllm-observed.json"


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRED_ENV}=1: the engine and the image must be there)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine() -> Iterator[Any]:
    """A docker SDK client for the engine on this machine, with faultday's image built."""
    try:
        import docker  # type: ignore[import-untyped]
    except ImportError:
        _unavailable("the docker SDK is not installed (faultday[k8s])")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except docker.errors.DockerException as exc:
        _unavailable(f"no Docker engine reachable: {exc}")
    try:
        client.images.get(faultday_image())
    except docker.errors.ImageNotFound:
        _unavailable(f"image {faultday_image()} not built (make images)")
    yield client
    client.close()


def vllm_image_tag() -> str:
    doc = yaml.safe_load(REAL_PROFILE.read_text())
    return str(doc["spec"]["components"]["llm-primary"]["image"])


@pytest.fixture(scope="session")
def vllm_image(engine: Any) -> str:
    """The vLLM-CPU image docker-real names, built here (``make image-vllm``)."""
    import docker  # as in ``engine``: the SDK is an optional dependency

    tag = vllm_image_tag()
    try:
        engine.images.get(tag)
    except docker.errors.ImageNotFound:
        _unavailable(f"image {tag} not built (make image-vllm)")
    return tag


@pytest.fixture
def observe(request: pytest.FixtureRequest) -> Callable[[str, object], None]:
    """Record one observed value for this test (shown at the end of the run)."""
    return recorder(request, OBSERVED)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    write_summary(
        terminalreporter, config, OBSERVED, "observed on real vLLM in a container", OBSERVED_FILE
    )


def leftovers(client: Any, label: str) -> list[str]:
    """Containers, networks and volumes with ``label`` (k=v): must be none after a stack."""
    flt = {"label": label}
    out = [f"container {c.name}" for c in client.containers.list(all=True, filters=flt)]
    out += [f"network {n.name}" for n in client.networks.list(filters=flt)]
    out += [f"volume {v.name}" for v in client.volumes.list(filters=flt)]
    return out


@pytest.fixture(scope="session")
def nothing_left(engine: Any) -> Callable[[str], list[str]]:
    """``nothing_left(label)``: what the engine still holds with that label."""
    return lambda label: leftovers(engine, label)

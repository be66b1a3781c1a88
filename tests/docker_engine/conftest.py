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

from faultday.cluster.compose import faultday_image

REPO = Path(__file__).resolve().parents[2]
REQUIRED_ENV = "FAULTDAY_DOCKER_REQUIRED"


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

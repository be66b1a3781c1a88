"""``faultday stack … --driver docker``: the stack commands for the docker driver.

``up`` runs the profile as containers and writes the same state file as the
process driver (with ``driver: docker``); ``status`` and ``down`` — from another
shell — find the containers again by name and labels (``DockerStack.adopt``),
and ``down`` completes the cleanup record ``up`` wrote to the run's ledger.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from faultday.cluster.docker import DockerConfig, DockerStack
from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile
from faultday.errors import StackError, UsageError
from faultday.stack.stack import StackInfo

BUILD_SCRIPT = Path("docker-build") / "build-images.sh"


def _stack(prof: StackProfile, run_dir: Path, *, image: str | None = None) -> DockerStack:
    config = DockerConfig(image=image)
    return DockerStack(prof, run_dir=run_dir, ledger=Ledger.in_dir(run_dir), config=config)


def docker_up(
    prof: StackProfile, run_dir: Path, *, policy: str | None, timeout: float, image: str | None
) -> StackInfo:
    """Start the profile as containers; their state once every one is ready."""
    config = DockerConfig(image=image, ready_timeout=timeout)
    ledger = Ledger.in_dir(run_dir)
    stack = DockerStack(prof, run_dir=run_dir, ledger=ledger, policy=policy, config=config)
    stack.up(timeout=timeout)
    return stack.describe()


def docker_status(prof: StackProfile, run_dir: Path) -> StackInfo:
    """The containers of the stack ``up`` started, as the engine sees them now."""
    stack = _stack(prof, run_dir)
    stack.adopt()
    return stack.describe()


def docker_down(prof: StackProfile, run_dir: Path) -> None:
    """Remove the stack's containers and network; mark ``up``'s cleanup record done."""
    stack = _stack(prof, run_dir)
    stack.adopt()
    stack.down()


def build_images(*, offline: bool, image: str | None) -> None:
    """Run ``docker-build/build-images.sh`` from this checkout (the image is built, not
    published: the wheelhouse comes from this source tree)."""
    here = Path.cwd() / BUILD_SCRIPT
    source = Path(__file__).resolve().parents[2] / BUILD_SCRIPT
    script = here if here.is_file() else source
    if not script.is_file():
        raise UsageError(f"no {BUILD_SCRIPT} here or in {source.parents[1]}: run it in a checkout")
    env = dict(os.environ)
    if offline:
        env["FAULTDAY_OFFLINE"] = "1"
    if image:
        env["FAULTDAY_IMAGE"] = image
    # Bounded: a cold offline build (debootstrap, wheelhouse, image) takes ~5 minutes here.
    done = subprocess.run(["bash", str(script)], env=env, timeout=1800, check=False)
    if done.returncode != 0:
        raise StackError(f"{script} failed (exit {done.returncode})")

"""The compose rendering on faultday's image: `docker-compose config` accepts it, and
`docker-compose up -d` brings every service to healthy (Debian's docker-compose 1.29)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from faultday.cluster.docker_render import render_compose
from faultday.core.profile import load_profile

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]


def test_compose_rendering_is_accepted_and_comes_up_healthy(
    engine: Any, nothing_left: Callable[[str], list[str]], tmp_path: Path
) -> None:
    """`docker-compose config` accepts it; `up -d` brings every service to healthy."""
    project = "faultday-compose-test"
    profile = load_profile("local", base_dir=REPO)
    rendered = render_compose(profile, out=tmp_path, project=project)
    services = rendered.services  # the profile less what containers do not run (its collector)
    dc = ["docker-compose", "-p", project, "-f", str(tmp_path / "compose.yaml")]
    done = subprocess.run([*dc, "config", "-q"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    try:
        t0 = time.monotonic()
        up = subprocess.run([*dc, "up", "-d"], capture_output=True, text=True, timeout=600)
        assert up.returncode == 0, up.stderr
        flt = {"label": f"com.docker.compose.project={project}"}
        deadline = time.monotonic() + 300
        while True:
            states = {
                c.name: (c.attrs["State"].get("Health") or {}).get("Status")
                for c in engine.containers.list(all=True, filters=flt)
            }
            if len(states) == len(services) and set(states.values()) == {"healthy"}:
                break
            assert time.monotonic() < deadline, states
            time.sleep(1)
        print(f"compose up -d healthy in {time.monotonic() - t0:.1f}s")
        _attach_run(tmp_path, project)
        # Attach touches nothing at down: the user's containers are all still there.
        assert len(engine.containers.list(filters=flt)) == len(services)
    finally:
        subprocess.run([*dc, "down", "-v", "--timeout", "5"], capture_output=True, timeout=300)
    assert nothing_left(f"com.docker.compose.project={project}") == []


def _attach_run(tmp_path: Path, project: str) -> None:
    """`faultday run --driver docker` in attach mode against the compose project: a
    container_pause on the tool server, injected and reverted."""
    scenario = tmp_path / "attach.scenario.yaml"
    scenario.write_text(
        "apiVersion: faultday/v1\nkind: Scenario\nmetadata: {name: attach-pause}\n"
        "spec:\n  stack: local\n  duration: 8s\n  warmup: 0s\n  load: {workload: none}\n"
        "  faults:\n"
        "    - {name: freeze, inject: container_pause, target: tools, at: 1s, duration: 3s}\n"
    )
    target = tmp_path / "attach.yaml"
    target.write_text(
        f"apiVersion: faultday/v1\nkind: DockerTarget\nspec: {{mode: attach, project: {project}}}\n"
    )
    report = tmp_path / "r"
    argv = [sys.executable, "-m", "faultday.cli", "run", str(scenario), "--driver", "docker"]
    argv += ["--driver-config", str(target), "--report-dir", str(report), "--no-progress"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = report.iterdir()
    faults = json.loads((run / "journal.json").read_text())["faults"]
    assert [(f["name"], f["revert_ok"]) for f in faults] == [("freeze", True)]

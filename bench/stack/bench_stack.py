"""bench/stack: the local stack from cold to all-healthy, and down, leaving no process behind.

    .venv/bin/python bench/stack/bench_stack.py [--cycles 3] [--profile local] [--only a,b]
                                                [--docker]

Prints one JSON object: per-cycle up/down seconds, per-component ready times,
the CPU seconds each component's processes had used when the stack was up, when
the agent's client SDKs (imported after it serves) were loaded, and the count of
processes and PyTriton /dev/shm segments left behind (both must be 0). Targets
(issue 5): up <= 6 s, down <= 3 s on the project's reference machine.
With ``--docker``, the same profile is also brought up and down as containers
(the docker driver, faultday's image: ``make images``) in the same run, under
``"docker"``, with what the engine still holds of it after each down (must be 0);
without an engine or the image that part says why it was skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import docker  # type: ignore[import-untyped]
import httpx
import psutil

from faultday.cluster.config import PART_OF_LABEL, part_of_value
from faultday.cluster.docker import DockerStack
from faultday.cluster.docker_render import faultday_image
from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile, load_profile
from faultday.stack import shm
from faultday.stack.stack import RUN_MARKER, Stack
from faultday.stack.supervisor import group_pids

REPO = Path(__file__).resolve().parents[2]


def strays(run_dir: Path) -> list[int]:
    left = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(RUN_MARKER) == str(run_dir):
                left.append(p.pid)
    return left


def cpu_seconds(stack: Stack) -> dict[str, float]:
    """CPU (user + system) used so far by each component's live processes."""
    out = {}
    for c in stack.profile.spec.components:
        m = stack.supervisor.managed(c)
        total = 0.0
        if m is not None and m.pid is not None:
            for pid in group_pids(m.pid):
                with contextlib.suppress(psutil.Error):
                    t = psutil.Process(pid).cpu_times()
                    total += t.user + t.system
        out[c] = round(total, 2)
    return out


def agent_sdks_loaded(stack: Stack, t0: float, *, timeout: float = 20.0) -> float | None:
    """Seconds from the start of up until the agent reports its client SDKs loaded."""
    url = stack.endpoints().get("agent")
    if url is None:
        return None
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                if http.get(f"{url}/health").json().get("client_sdks_loaded"):
                    return round(time.monotonic() - t0, 2)
            time.sleep(0.02)
    return None


def docker_cycles(profile: StackProfile, cycles: int) -> dict[str, object]:
    """Up/down of the profile as containers; what the engine keeps of it after down."""
    try:
        client = docker.from_env(timeout=30)
        client.ping()
        client.images.get(faultday_image())
    except Exception as exc:  # noqa: BLE001 - any reason there is no engine or image is reported
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    flt = {"label": f"{PART_OF_LABEL}={part_of_value(profile.name)}"}
    out: list[dict[str, object]] = []
    for _ in range(cycles):
        run_dir = Path(tempfile.mkdtemp(prefix="faultday-bench-docker-"))
        s = DockerStack(profile, run_dir=run_dir, ledger=Ledger.in_dir(run_dir))
        t0 = time.monotonic()
        s.up(timeout=300)
        up_s = time.monotonic() - t0
        t1 = time.monotonic()
        s.down()
        down_s = time.monotonic() - t1
        left = len(client.containers.list(all=True, filters=flt))
        left += len(client.networks.list(filters=flt)) + len(client.volumes.list(filters=flt))
        shutil.rmtree(run_dir, ignore_errors=True)  # logs and state of a finished cycle
        out.append({"up_s": round(up_s, 2), "down_s": round(down_s, 2), "left_behind": left})
    client.close()
    return {
        "cycles": out,
        "up_median_s": statistics.median(float(str(c["up_s"])) for c in out),
        "down_median_s": statistics.median(float(str(c["down_s"])) for c in out),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--profile", default="local")
    ap.add_argument("--only", default="")
    ap.add_argument("--docker", action="store_true", help="also up/down with the docker driver")
    a = ap.parse_args()
    profile = load_profile(a.profile, base_dir=REPO)
    if a.only:
        profile = profile.subset(a.only.split(","))
    cycles = []
    ups: list[float] = []
    downs: list[float] = []
    for _ in range(max(1, min(a.cycles, 20))):
        run_dir = Path(tempfile.mkdtemp(prefix="faultday-bench-stack-"))
        s = Stack(profile, run_dir=run_dir, ledger=Ledger.in_dir(run_dir))
        shm_before = set(os.listdir(shm.SHM_DIR))
        t0 = time.monotonic()
        s.up(timeout=120)
        up_s = time.monotonic() - t0
        ready = s.ready_times()
        cpu = cpu_seconds(s)
        warm = agent_sdks_loaded(s, t0)
        t1 = time.monotonic()
        s.down()
        down_s = time.monotonic() - t1
        shm_left = {n for n in set(os.listdir(shm.SHM_DIR)) - shm_before}
        ups.append(round(up_s, 2))
        downs.append(round(down_s, 2))
        cycles.append(
            {
                "up_s": round(up_s, 2),
                "down_s": round(down_s, 2),
                "ready_s": {k: round(v, 2) for k, v in sorted(ready.items(), key=lambda kv: kv[1])},
                "cpu_s_at_up": cpu,
                "agent_sdks_loaded_s": warm,
                "left_behind": len(strays(run_dir)),
                "shm_left_behind": sorted(n for n in shm_left if shm.is_python_shm(n)),
            }
        )
        shutil.rmtree(run_dir, ignore_errors=True)  # after the leftover scan that reads it
        time.sleep(1.0)  # let ports settle between cycles
    on_docker = docker_cycles(profile, max(1, min(a.cycles, 20))) if a.docker else None
    print(
        json.dumps(
            {
                "profile": profile.name,
                "components": list(profile.spec.components),
                "cycles": cycles,
                "up_median_s": round(statistics.median(ups), 2),
                "down_median_s": round(statistics.median(downs), 2),
                "machine": f"{platform.machine()} {psutil.cpu_count()} cpus, "
                f"load {psutil.getloadavg()[0]:.2f}",
                **({"docker": on_docker} if on_docker is not None else {}),
            },
            indent=2,
        )
    )
    clean = all(c["left_behind"] == 0 and not c["shm_left_behind"] for c in cycles)
    if on_docker is not None and "cycles" in on_docker:
        clean = clean and all(c["left_behind"] == 0 for c in on_docker["cycles"])  # type: ignore[attr-defined]
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())

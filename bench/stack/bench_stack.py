"""bench/stack: the local stack from cold to all-healthy, and down, leaving no process behind.

    .venv/bin/python bench/stack/bench_stack.py [--cycles 3] [--profile local] [--only a,b]

Prints one JSON object: per-cycle up/down seconds, per-component ready times,
and the count of processes left behind (must be 0). Targets (issue 5): up <= 6 s,
down <= 3 s on the project's reference machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from faultday.engine.ledger import Ledger
from faultday.stack.profile import load_profile
from faultday.stack.stack import RUN_MARKER, Stack

REPO = Path(__file__).resolve().parents[2]


def strays(run_dir: Path) -> list[int]:
    left = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(RUN_MARKER) == str(run_dir):
                left.append(p.pid)
    return left


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--profile", default="local")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    profile = load_profile(a.profile, base_dir=REPO)
    if a.only:
        profile = profile.subset(a.only.split(","))
    cycles = []
    for _ in range(max(1, min(a.cycles, 20))):
        run_dir = Path(tempfile.mkdtemp(prefix="faultday-bench-stack-"))
        s = Stack(profile, run_dir=run_dir, ledger=Ledger.in_dir(run_dir))
        t0 = time.monotonic()
        s.up(timeout=120)
        up_s = time.monotonic() - t0
        ready = s.ready_times()
        t1 = time.monotonic()
        s.down()
        down_s = time.monotonic() - t1
        cycles.append(
            {
                "up_s": round(up_s, 2),
                "down_s": round(down_s, 2),
                "ready_s": {k: round(v, 2) for k, v in sorted(ready.items(), key=lambda kv: kv[1])},
                "left_behind": len(strays(run_dir)),
            }
        )
        time.sleep(1.0)  # let ports and /dev/shm settle between cycles
    ups = [c["up_s"] for c in cycles]
    downs = [c["down_s"] for c in cycles]
    print(
        json.dumps(
            {
                "profile": profile.name,
                "components": list(profile.spec.components),
                "cycles": cycles,
                "up_median_s": statistics.median(ups),
                "down_median_s": statistics.median(downs),
                "machine": f"{platform.machine()} {psutil.cpu_count()} cpus, "
                f"load {psutil.getloadavg()[0]:.2f}",
            },
            indent=2,
        )
    )
    return 0 if all(c["left_behind"] == 0 for c in cycles) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Processes carrying a ledger's marker (``MARKER_ENV`` in their environment).

The marker is written to the ledger before the first spawn and handed to every
child in its environment, which its own children inherit (tritonserver and its
Python stubs, vLLM's EngineCore, Locust's workers). ``/proc/PID/environ`` keeps
the environment a process was started with, so they are found by it even when
the harness died before their PIDs reached the ledger, and never by their name.

Some programs overwrite that area with their process title (redis-server does), so
a process is also the run's when it runs in the ledger's folder (every component's
working directory) and started within seconds after a ``spawn`` record: both must
hold, so a shell someone opened in the run folder later is never taken for one.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

import psutil

from faultday.core.ledger import MARKER_ENV, Ledger

PROC = Path("/proc")
_KEY = MARKER_ENV.encode() + b"="
SPAWN_WINDOW_S = 5.0  # a spawned process starts this soon after its spawn record
# psutil's start times count from the kernel's boot time in whole seconds (and a VM's
# clock drifts from it): seen 1 s early here.
CLOCK_SLACK_S = 2.0


def ledger_pids(ledger: Ledger, *, proc: Path = PROC) -> list[int]:
    """Every live process of this ledger's run: by marker, or by folder and spawn time."""
    found = {p for pids in marked_pids(ledger.markers(), proc=proc).values() for p in pids}
    return sorted(found | _spawned_in(ledger.path.parent, ledger.spawn_times(), proc=proc))


def _spawned_in(folder: Path, times: list[float], *, proc: Path) -> set[int]:
    if not times:
        return set()
    want = str(folder.resolve())
    found = set()
    for pid in _pids(proc):
        try:
            if os.readlink(proc / str(pid) / "cwd") != want:
                continue
            p = psutil.Process(pid)
            started = p.create_time()
            zombie = p.status() == psutil.STATUS_ZOMBIE
        except (OSError, psutil.Error):
            continue
        if not zombie and any(
            t - CLOCK_SLACK_S <= started <= t + SPAWN_WINDOW_S + CLOCK_SLACK_S for t in times
        ):
            found.add(pid)
    return found


def _pids(proc: Path) -> list[int]:
    try:
        me = os.getpid()
        return [int(e.name) for e in proc.iterdir() if e.name.isdigit() and int(e.name) != me]
    except OSError:
        return []


def marked_pids(markers: Collection[str], *, proc: Path = PROC) -> dict[str, list[int]]:
    """Live processes (zombies excluded) carrying each marker; never this process itself."""
    wanted = {m.encode() for m in markers}
    found: dict[str, list[int]] = {}
    if not wanted:
        return found
    for pid in _pids(proc):
        value = _marker_of(proc / str(pid))
        if value in wanted and value is not None:
            found.setdefault(value.decode(), []).append(pid)
    return found


def _marker_of(pid_dir: Path) -> bytes | None:
    try:
        env = (pid_dir / "environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return None
    for item in env.split(b"\0"):
        if item.startswith(_KEY):
            return item[len(_KEY) :]
    return None

"""Processes carrying a ledger's marker (``MARKER_ENV`` in their environment).

The marker is written to the ledger before the first spawn and handed to every
child in its environment, which its own children inherit (tritonserver and its
Python stubs, vLLM's EngineCore, Locust's workers). ``/proc/PID/environ`` keeps
the environment a process was started with, so they are found by it even when
the harness died before their PIDs reached the ledger, and never by their name.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from faultday.engine.ledger import MARKER_ENV

PROC = Path("/proc")
_KEY = MARKER_ENV.encode() + b"="


def marked_pids(markers: Collection[str], *, proc: Path = PROC) -> dict[str, list[int]]:
    """Live processes (zombies excluded) carrying each marker; never this process itself."""
    wanted = {m.encode() for m in markers}
    found: dict[str, list[int]] = {}
    if not wanted:
        return found
    try:
        pids = [int(e.name) for e in proc.iterdir() if e.name.isdigit()]
    except OSError:
        return found
    me = os.getpid()
    for pid in pids:
        if pid == me:
            continue
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

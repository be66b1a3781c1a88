"""Python shared memory in /dev/shm (PyTriton's, vLLM's): find what a run holds, remove leftovers.

An orderly stop unlinks these; a SIGKILL of a process group (an escalated stop, a
process_kill fault, ``faultday recover`` after a crash) takes Python's resource
tracker down too and leaves them in /dev/shm, hundreds of MB each on paper.
Three kinds, all recognisable by name:

* ``pytrtion<pid>-…`` (sic): the Python backend's region, named after the PyTriton
  process that started tritonserver, so the component's leader PID names it;
* ``psm_<hex>``: ``multiprocessing.shared_memory`` blocks (PyTriton's TensorStore
  with ``--tensor-store``, vLLM's message queues); anonymous, so they must be seen
  mapped by the run's processes before those die;
* ``sem.mp-…``: multiprocessing's named semaphores (vLLM), seen the same way.

A segment is removed only when it belongs to the run (its leader's name, or seen
mapped by the run's processes) *and* no live process maps it any more; another
program's segments are never touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")  # noqa: S108 - the POSIX shared-memory mount, not a temp file
PROC = Path("/proc")
# psm_*: multiprocessing.shared_memory blocks (PyTriton's TensorStore, vLLM's message
# queues); sem.mp-*: multiprocessing's named semaphores. Both are normally unlinked by
# Python's resource tracker, which a SIGKILLed process group takes down with it.
_NAME = re.compile(r"^(?:psm_[0-9a-f]+|pytrtion\d+-[0-9a-f-]+|sem\.mp-[0-9a-z_]+)$")


def is_python_shm(name: str) -> bool:
    """A segment or semaphore Python's multiprocessing makes (PyTriton's, vLLM's)."""
    return bool(_NAME.match(name))


def held_segments(pids: Iterable[int], *, proc: Path = PROC) -> set[str]:
    """Names of Python shared-memory segments in /dev/shm these processes map or hold open."""
    names: set[str] = set()
    for pid in pids:
        names |= _mapped(pid, proc=proc)
        with contextlib.suppress(OSError):
            for fd in (proc / str(pid) / "fd").iterdir():
                with contextlib.suppress(OSError):
                    names |= _names_in([os.readlink(fd)])
    return names


def leader_segments(pid: int, *, shm_dir: Path = SHM_DIR) -> set[str]:
    """The Python backend regions of the PyTriton process ``pid`` still in /dev/shm."""
    prefix = f"pytrtion{pid}-"
    try:
        return {
            p.name for p in shm_dir.iterdir() if p.name.startswith(prefix) and is_python_shm(p.name)
        }
    except OSError:
        return set()


def remove_orphaned(
    names: Iterable[str], *, shm_dir: Path = SHM_DIR, proc: Path = PROC
) -> list[str]:
    """Unlink each named segment that still exists and that no live process maps."""
    removed = []
    for name in sorted(orphaned(names, shm_dir=shm_dir, proc=proc)):
        try:
            (shm_dir / name).unlink()
        except FileNotFoundError:
            continue  # its owner finished its own clean-up meanwhile
        except OSError as exc:
            log.warning("cannot remove %s/%s: %s", shm_dir, name, exc)
            continue
        removed.append(name)
    if removed:
        log.info("removed %d shared-memory segments left by killed processes", len(removed))
    return removed


def orphaned(names: Iterable[str], *, shm_dir: Path = SHM_DIR, proc: Path = PROC) -> set[str]:
    """The named segments that still exist in /dev/shm and that no live process maps."""
    todo = {n for n in names if is_python_shm(n) and (shm_dir / n).exists()}
    if not todo:
        return set()
    in_use: set[str] = set()
    for pid in _proc_pids(proc):
        in_use |= _mapped(pid, proc=proc) & todo
    return todo - in_use


def _proc_pids(proc: Path) -> list[int]:
    try:
        return [int(e.name) for e in proc.iterdir() if e.name.isdigit()]
    except OSError:
        return []


def _mapped(pid: int, *, proc: Path) -> set[str]:
    try:
        lines = (proc / str(pid) / "maps").read_text().splitlines()
    except OSError:  # gone, or not ours to read
        return set()
    # The path is the 6th field; it is absent for anonymous mappings.
    rows = [parts for ln in lines if len(parts := ln.split(maxsplit=5)) == 6]
    names = _names_in(parts[5] for parts in rows)
    # glibc makes a named semaphore under a temporary name, links it to its real one
    # and unlinks the temporary: the mapping shows "sem.XXXXXX (deleted)". The inode
    # is the same, so such mappings are matched to /dev/shm entries by inode.
    hidden = {
        int(parts[4])
        for parts in rows
        if parts[5].startswith(f"{SHM_DIR}/") and parts[5].endswith(" (deleted)")
    }
    if hidden:
        names |= _by_inode(hidden)
    return names


def _by_inode(inodes: set[int]) -> set[str]:
    out = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(SHM_DIR):
            with contextlib.suppress(OSError):
                if is_python_shm(entry.name) and entry.inode() in inodes:
                    out.add(entry.name)
    return out


def _names_in(paths: Iterable[str]) -> set[str]:
    out = set()
    prefix = f"{SHM_DIR}/"
    for path in paths:
        if path.startswith(prefix):
            name = path[len(prefix) :].removesuffix(" (deleted)")
            if is_python_shm(name):
                out.add(name)
    return out

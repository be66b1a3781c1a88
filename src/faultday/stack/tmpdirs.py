"""Folders tritonserver makes in /tmp whatever TMPDIR says: find the run's, remove them.

Every component gets ``TMPDIR`` inside its run folder, and Python's ``tempfile``
honours it. Triton does not: its core copies the model repository to
``/tmp/folderXXXXXX`` and its Python backend makes ``/tmp/python_env_XXXXXX``,
both with hard-coded paths, and removes them only on an orderly shutdown. A
SIGKILL (an escalated stop, a crash of the harness, recover) leaves them, dozens
a day. They are found from the run's own processes, never by name alone:

* ``folder*``: the Python backend stub names its model file inside it on its
  command line;
* ``python_env_*``: made by tritonserver at the backend's start, seconds around
  the model folder (or the server's own start when no stub runs yet). Only an
  empty one is removed: PyTriton never extracts an execution environment into it.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

TMP = Path("/tmp")  # noqa: S108 - where Triton hard-codes its folders; we only clean them
PROC = Path("/proc")
_FOLDER = "folder"
_PY_ENV = "python_env_"
ENV_WINDOW_S = 5.0  # python_env_ is made within seconds of the model folder
START_WINDOW_S = 60.0  # … or, without a stub yet, of tritonserver's start


def held_tmp_dirs(pids: Iterable[int], *, proc: Path = PROC, tmp: Path = TMP) -> set[Path]:
    """Triton's /tmp folders that belong to these processes (see the module docstring)."""
    pids = list(pids)
    folders: set[Path] = set()
    for pid in pids:
        folders |= {d for a in _cmdline(proc / str(pid)) if (d := _folder_of(a, tmp)) is not None}
    return left_near(triton_starts(pids, proc=proc), folders, proc=proc, tmp=tmp)


def triton_starts(pids: Iterable[int], *, proc: Path = PROC) -> list[float]:
    """When the tritonserver processes among ``pids`` started (to find their folders later)."""
    starts = []
    for pid in pids:
        argv = _cmdline(proc / str(pid))
        if argv and Path(argv[0]).name == "tritonserver":
            try:
                starts.append(psutil.Process(pid).create_time())
            except psutil.Error:
                continue
    return starts


def left_near(
    starts: Iterable[float], known: Iterable[Path] = (), *, proc: Path = PROC, tmp: Path = TMP
) -> set[Path]:
    """The ``known`` folders, plus what tritonserver processes started at ``starts`` made.

    Also usable once they are gone: a server killed between copying its model folder
    and starting the stub leaves a folder no command line names. A model folder made
    within ``START_WINDOW_S`` of a start and named by no live process counts as its.
    """
    starts = list(starts)
    folders = {f for f in known if f.is_dir()}
    if starts:
        named = _named_folders(proc, tmp)
        folders |= {
            f
            for f in _entries(tmp, _FOLDER)
            if f not in named and (f / "config.pbtxt").is_file() and _near(_ctime(f), starts)
        }
    anchors = [(_ctime(f), ENV_WINDOW_S) for f in folders]
    if not anchors:
        anchors = [(t, START_WINDOW_S) for t in starts]
    return folders | _python_envs(anchors, tmp)


def _near(t: float, starts: list[float]) -> bool:
    return any(s - 1.0 <= t <= s + START_WINDOW_S for s in starts)


def _named_folders(proc: Path, tmp: Path) -> set[Path]:
    """Model folders a live process names on its command line (another server's)."""
    named: set[Path] = set()
    try:
        pids = [e for e in proc.iterdir() if e.name.isdigit()]
    except OSError:
        return named
    for pid_dir in pids:
        named |= {d for a in _cmdline(pid_dir) if (d := _folder_of(a, tmp)) is not None}
    return named


def _entries(tmp: Path, prefix: str) -> list[Path]:
    try:
        return [p for p in tmp.iterdir() if p.name.startswith(prefix) and p.is_dir()]
    except OSError:
        return []


def remove_tmp_dirs(dirs: Iterable[Path]) -> list[str]:
    """Remove each folder; a python_env_ only while empty. Returns what was removed."""
    removed = []
    for d in sorted(dirs):
        if not d.is_dir():
            continue
        try:
            if d.name.startswith(_PY_ENV):
                d.rmdir()  # never a non-empty one: that is not PyTriton's
            else:
                shutil.rmtree(d)
        except OSError as exc:
            log.warning("cannot remove %s: %s", d, exc)
            continue
        removed.append(str(d))
    return removed


def _cmdline(pid_dir: Path) -> list[str]:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _folder_of(arg: str, tmp: Path) -> Path | None:
    path = Path(arg)
    if len(path.parts) > len(tmp.parts) and path.parts[: len(tmp.parts)] == tmp.parts:
        top = tmp / path.parts[len(tmp.parts)]
        if top.name.startswith(_FOLDER) and len(top.name) == len(_FOLDER) + 6:
            return top
    return None


def _ctime(path: Path) -> float:
    try:
        return path.stat().st_ctime
    except OSError:
        return 0.0


def _python_envs(anchors: list[tuple[float, float]], tmp: Path) -> set[Path]:
    out = set()
    for p in _entries(tmp, _PY_ENV) if anchors else []:
        t = _ctime(p)
        if any(a - 1.0 <= t <= a + w for a, w in anchors) and not any(p.iterdir()):
            out.add(p)
    return out

"""Fixtures for stack tests: a run folder, and a check that no process is left behind."""

from __future__ import annotations

import contextlib
import signal
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile, load_profile
from faultday.stack.stack import RUN_MARKER, Stack

REPO = Path(__file__).resolve().parents[2]


def marked_processes(run_dir: Path) -> list[psutil.Process]:
    """Every live process started for ``run_dir`` (they inherit a marker variable)."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get(RUN_MARKER) == str(run_dir):
                found.append(p)
    return found


def write_profile(path: Path, body: str) -> Path:
    head = "apiVersion: faultday/v1\nkind: StackProfile\nmetadata: {name: t}\n"
    path.write_text(head + textwrap.dedent(body))
    return path


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Build stacks from YAML text or a profile; all are torn down and checked for strays."""
    stacks: list[Stack] = []
    n = 0

    def make(profile: str | StackProfile, **kw: object) -> Stack:
        nonlocal n
        n += 1
        if isinstance(profile, str):
            profile = load_profile(
                str(write_profile(tmp_path / f"p{n}.yaml", profile)), base_dir=tmp_path
            )
        run_dir = tmp_path / f"run{n}"
        s = Stack(profile, run_dir=run_dir, ledger=Ledger.in_dir(run_dir), **kw)  # type: ignore[arg-type]
        stacks.append(s)
        return s

    try:
        yield make
    finally:
        strays = []
        for s in stacks:
            s.down()
            left = marked_processes(s.run_dir)
            strays += [f"{p.pid} {p.cmdline()[:3]}" for p in left]
            for p in left:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(signal.SIGKILL)
        assert not strays, f"processes left behind: {strays}"

"""The process sampler on real child processes: RSS and FDs of the whole tree, a restart
followed to its new PID, a component without a PID named, every event and bound kept."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from faultday.core.clock import Clock
from faultday.core.events import RunEvents
from faultday.core.records import Observations
from faultday.core.targets import Target, TargetKind
from faultday.observe.procs import FDS, RSS, ProcessSampler

MIB = 2**20
# A child that keeps 30 MiB and leaves when its parent is gone (killed: no leftovers).
CHILD = (
    "import os, time\nk = bytearray(30 << 20)\np = os.getppid()\nprint('up', flush=True)\n"
    "while os.getppid() == p: time.sleep(0.1)"
)
# A parent that keeps 40 MiB and 20 open files, with that child.
HOLDER = f"""
import subprocess, sys, time
keep = bytearray(40 << 20)
files = [open(sys.argv[1], "rb") for _ in range(20)]
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdout=subprocess.PIPE, text=True)
child.stdout.readline()  # its 30 MiB are held
print("ready", flush=True)
try:
    time.sleep(60)
finally:
    child.kill()
"""


@dataclass
class FakeStack:
    """What the sampler asks of a driver: its target names (an edge among them)."""

    names: list[str]

    def target_names(self) -> list[str]:
        return self.names


@dataclass
class View:
    """A RunView with real processes behind its targets."""

    pids: dict[str, int | None]
    run_dir: Path
    clock: Clock = field(default_factory=Clock)
    observations: Observations = field(default_factory=Observations)
    timeline: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    events: RunEvents = field(default_factory=RunEvents)
    scenario: SimpleNamespace = field(
        default_factory=lambda: SimpleNamespace(spec=SimpleNamespace(warmup=0.0))
    )

    @property
    def stack(self) -> FakeStack:
        return FakeStack([*self.pids, "a->b"])

    def target(self, name: str) -> Target:
        return Target(name=name, kind=TargetKind.COMPONENT, pid=self.pids[name])

    def event(self, kind: str, message: str = "", **data: object) -> None:
        self.timeline.append((kind, data))


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        with contextlib.suppress(ProcessLookupError):
            p.terminate()
        p.wait(timeout=10)


def holder(tmp_path: Path, started: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, __file__], stdout=subprocess.PIPE, text=True
    )
    started.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def last(view: View, name: str, comp: str) -> float:
    samples = [s for s in view.observations.samples if s.name == name and s.labels[0][1] == comp]
    return samples[-1].value


def test_the_tree_is_summed_and_a_restart_followed(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    first = holder(tmp_path, holders)
    view = View({"app": first.pid, "remote": None}, tmp_path)
    sampler = ProcessSampler(interval=0.05)
    sampler.start(view)  # type: ignore[arg-type]
    try:
        time.sleep(0.3)
        assert last(view, RSS, "app") > 70 * MIB  # parent 40 + child 30
        assert last(view, FDS, "app") >= 20
        first.kill()
        first.wait(timeout=10)
        second = holder(tmp_path, holders)  # the "restarted" component
        view.pids["app"] = second.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sampler.gone == 0:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        sampler.stop()
        sampler.stop()  # idempotent
    assert sampler.gone >= 1
    assert last(view, RSS, "app") > 70 * MIB  # the new PID, sampled
    kinds = [k for k, _ in view.timeline]
    assert kinds == ["procs.started", "procs.stopped"]
    assert view.timeline[0][1] == {"components": ["app"], "without_pid": ["remote"]}
    stopped = view.timeline[1][1]
    assert stopped["rounds"] == sampler.rounds and sampler.rounds > 5
    assert all(s.t >= 0 for s in view.observations.samples)  # scenario seconds, warm-up 0

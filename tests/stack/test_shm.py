"""PyTriton's /dev/shm segments: removed after a hard kill, only the run's, only when unused."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing import shared_memory
from pathlib import Path

import psutil
import pytest
from tests.stack.conftest import REPO, marked_processes

from faultday.core.ledger import Ledger, ProcessRecord
from faultday.core.profile import load_profile
from faultday.engine.recover import recover_run
from faultday.stack import shm
from faultday.stack.stack import Stack
from faultday.stack.supervisor import group_pids, stop_recorded_processes

# A process that creates a psm_* segment like PyTriton's TensorStore, keeps it mapped,
# prints its name, and sleeps. Its resource tracker is told to forget the segment, as
# a SIGKILLed tracker would: otherwise it unlinks it when the holder dies.
HOLDER = """
import time
from multiprocessing import resource_tracker, shared_memory
seg = shared_memory.SharedMemory(create=True, size=4096)
resource_tracker.unregister(seg._name, "shared_memory")
print(seg.name, flush=True)
time.sleep(60)
"""


def _hold_segment() -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert p.stdout is not None
    name = p.stdout.readline().strip().lstrip("/")
    assert name.startswith("psm_"), name
    return p, name


def _kill_group(p: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=5)
    deadline = time.monotonic() + 5
    while group_pids(p.pid) and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def unlink_after() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for n in names:
        with contextlib.suppress(FileNotFoundError):
            (shm.SHM_DIR / n).unlink()


def test_a_killed_holders_segment_is_found_then_removed(unlink_after: list[str]) -> None:
    p, name = _hold_segment()
    unlink_after.append(name)
    try:
        held = shm.held_segments(group_pids(p.pid))
        assert name in held
        # Still mapped by a live process: never removed.
        assert shm.remove_orphaned(held) == []
        assert (shm.SHM_DIR / name).exists()
    finally:
        _kill_group(p)
    assert (shm.SHM_DIR / name).exists(), "SIGKILL leaves the segment (the leak)"
    assert shm.remove_orphaned(held) == [name]
    assert not (shm.SHM_DIR / name).exists()


def test_segments_of_other_processes_are_left_alone(unlink_after: list[str]) -> None:
    other = shared_memory.SharedMemory(create=True, size=4096)  # this test process maps it
    unlink_after.append(other.name.lstrip("/"))
    try:
        # Named explicitly, yet mapped by a live process that is not the run's.
        assert shm.remove_orphaned([other.name.lstrip("/")]) == []
        assert (shm.SHM_DIR / other.name.lstrip("/")).exists()
        # Names that are not PyTriton's are never touched, mapped or not.
        assert shm.remove_orphaned(["sem.mp-abc", "../etc/passwd", "psm_../x"]) == []
    finally:
        other.close()


def test_recover_removes_what_a_dead_harness_left(tmp_path: Path, unlink_after: list[str]) -> None:
    p, name = _hold_segment()
    unlink_after.append(name)
    ledger = Ledger.in_dir(tmp_path)
    try:
        ct = psutil.Process(p.pid).create_time()
        ledger.add_process(ProcessRecord("triton", p.pid, p.pid, ct))
        result = recover_run(tmp_path)  # what `faultday recover` runs
        assert result.stopped == 1  # one message per record, the segments in it
        assert any(f"removed /dev/shm/{name}" in m for m in result.messages), result.messages
        assert not (shm.SHM_DIR / name).exists()
        assert stop_recorded_processes(ledger) == []
    finally:
        _kill_group(p)


def test_down_after_a_hard_kill_of_triton_leaves_no_segment(tmp_path: Path) -> None:
    """The real PyTriton: its Python backend region survives a SIGKILL of its group."""
    before = set(os.listdir(shm.SHM_DIR))
    s = Stack(
        load_profile("local", base_dir=REPO).subset(["triton"]),
        run_dir=tmp_path,
        ledger=Ledger.in_dir(tmp_path),
    )
    try:
        s.up(timeout=90)
        m = s.supervisor.managed("triton")
        assert m is not None
        assert m.pid is not None
        region = shm.leader_segments(m.pid)
        assert region, "PyTriton's Python backend region is named after its process"
        # This test is about down(): keep the monitor from sweeping the dead group first
        # (it removes the region too, once the group is gone, which raced the check below).
        s.supervisor._stop_monitor.set()
        # Kill the group as a crash or an escalated stop would: no orderly clean-up.
        os.killpg(m.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while group_pids(m.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert region <= set(os.listdir(shm.SHM_DIR)), "the leak this guards against"
    finally:
        s.down()
    assert marked_processes(tmp_path) == []
    assert not {n for n in set(os.listdir(shm.SHM_DIR)) - before if shm.is_python_shm(n)}


# Like vLLM's API server after its EngineCore was killed: a process group holding a
# multiprocessing message queue (psm_*) and a named semaphore (sem.mp-*) whose leader
# exits by itself. The resource tracker is told to forget both, as a SIGKILLed tracker
# would; the supervisor noted them while the group was up and removes them once it is gone.
MQ_HOLDER = """
import multiprocessing as mp, os, socket, sys, time
from multiprocessing import resource_tracker, shared_memory
seg = shared_memory.SharedMemory(create=True, size=4096)
resource_tracker.unregister(seg._name, "shared_memory")
lock = mp.get_context("spawn").Lock()
resource_tracker.unregister(lock._semlock.name, "semaphore")
print(seg.name, lock._semlock.name, flush=True)
srv = socket.create_server(("127.0.0.1", int(sys.argv[1])))
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
os._exit(1)
"""


def test_a_component_that_dies_by_itself_leaves_no_queue_or_semaphore(tmp_path: Path) -> None:
    from faultday.core.profile import ProbeSpec, RestartSpec
    from faultday.stack.supervisor import Launch, Supervisor, free_port

    port, go = free_port(), tmp_path / "die-now"
    log = tmp_path / "holder.log"
    sup = Supervisor(ledger=Ledger.in_dir(tmp_path))
    launch = Launch(
        component="holder",
        argv=(sys.executable, "-c", MQ_HOLDER, str(port), str(go)),
        env=dict(os.environ),
        log_path=log,
        cwd=tmp_path,
        restart=RestartSpec(),
        stop_grace=2.0,
        shm_segments=True,
    )
    names: list[str] = []
    try:
        sup.start(launch)
        sup.wait_ready("holder", ProbeSpec(kind="tcp"), port=port, timeout=20)
        names = [n.lstrip("/") for n in log.read_text().split()[-2:]]
        assert names[0].startswith("psm_") and names[1].startswith("mp-"), names
        files = [shm.SHM_DIR / names[0], shm.SHM_DIR / f"sem.{names[1]}"]
        assert all(f.exists() for f in files)
        go.touch()
        deadline = time.monotonic() + 10
        while any(f.exists() for f in files) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(f.exists() for f in files), [f for f in files if f.exists()]
    finally:
        sup.stop_all()
        for f in (shm.SHM_DIR / n for n in names[:1]):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
        if len(names) > 1:
            with contextlib.suppress(FileNotFoundError):
                (shm.SHM_DIR / f"sem.{names[1]}").unlink()

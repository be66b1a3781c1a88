"""The real suite's ``stop`` leaves no shared memory behind (default suite: a plain Python child).

vLLM's EngineCore and Worker make multiprocessing message queues (``psm_*``) and
named semaphores (``sem.mp-*``); Python's resource tracker would unlink them, but
``stop`` SIGKILLs the whole process group, tracker included. This holder does the
same with its own tracker, so it needs no vLLM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.real.realstack import Server, stop

from faultday.stack import shm

HOLDER = """
import multiprocessing as mp, time
from multiprocessing import shared_memory
seg = shared_memory.SharedMemory(create=True, size=4096)
lock = mp.get_context("spawn").Lock()  # spawn: named, so it shows in /dev/shm
print(seg.name.lstrip("/"), "sem." + lock._semlock.name.lstrip("/"), flush=True)
time.sleep(60)
"""


def test_stop_of_a_killed_group_leaves_no_queue_or_semaphore(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    files: list[Path] = []
    try:
        assert proc.stdout is not None
        names = proc.stdout.readline().decode().split()
        files = [shm.SHM_DIR / n for n in names]
        assert len(files) == 2 and all(f.exists() for f in files), names
        assert names[0].startswith("psm_") and names[1].startswith("sem.mp-"), names
        stop(Server("vllm", proc, "http://127.0.0.1:1", tmp_path / "holder.log"))
        assert proc.poll() is not None
        assert not [f for f in files if f.exists()]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                f.unlink()

"""Fixtures for the real-vLLM suite (`make test-real`): the tiny model and one server at a time."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.observed import recorder, write_summary
from tests.real import realstack
from tests.real.realstack import REAL_PYTHON, ROOT, Servers

from faultday.stack import shm

OBSERVED = pytest.StashKey[dict[str, dict[str, object]]]()
# What real vLLM did, per test: printed at the end of the run and written here
# (git-ignored), so CI logs keep the figures docs/real-vllm.md quotes.
OBSERVED_FILE = ROOT / "reports" / "real-vllm-observed.json"
# Time for a segment's last mapping to go once the clean-up has killed the group.
SHM_SETTLE_S = 5.0


@pytest.fixture(autouse=True)
def no_shared_memory_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test after which a psm_*/sem.mp-* one of its servers mapped is still in
    /dev/shm with no live process mapping it.

    vLLM's message queues are ~400 MB a server; a SIGKILLed process group takes the
    resource tracker that would unlink them down with it, and an engine killed by a
    fault under load sometimes leaves its own (recorded as observed, not failed: it
    is vLLM's doing). What is judged is the clean-up -- realstack.stop(), which works
    as the stack's supervisor does -- and only on this suite's segments, so a leak or
    a segment of another suite running beside it is neither reported nor unlinked.
    """
    seen_before = set(realstack.SEEN_SEGMENTS)
    left_before = len(realstack.LEFT_BY_SERVERS)
    yield
    mine = realstack.SEEN_SEGMENTS - seen_before
    deadline = time.monotonic() + SHM_SETTLE_S
    while (left := shm.orphaned(mine)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if by_vllm := realstack.LEFT_BY_SERVERS[left_before:]:
        recorder(request, OBSERVED)("left in /dev/shm by the server itself, removed", by_vllm)
    if left:
        shm.remove_orphaned(left)
        pytest.fail(f"left in /dev/shm by this test's servers after clean-up: {sorted(left)}")


@pytest.fixture
def observe(request: pytest.FixtureRequest) -> Callable[[str, object], None]:
    """Record one observed value for this test (like record_property, shown in the summary)."""
    return recorder(request, OBSERVED)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    write_summary(terminalreporter, config, OBSERVED, "observed on real vLLM", OBSERVED_FILE)


@pytest.fixture(scope="session")
def real_python() -> Path:
    if not REAL_PYTHON.exists():
        why = f"{REAL_PYTHON} missing: run `bash scripts/setup-real-venv.sh` (make test-real)"
        # CI sets FAULTDAY_REAL_REQUIRED=1 so that a missing venv fails instead of skipping.
        if os.environ.get("FAULTDAY_REAL_REQUIRED") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return REAL_PYTHON


@pytest.fixture(scope="session")
def tiny_model(real_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama, built by the same code as `faultday stack make-tiny-model`."""
    out = tmp_path_factory.mktemp("tiny-model")
    scratch = tmp_path_factory.mktemp("tiny-model-tmp")  # torch's torchinductor_<user>
    done = subprocess.run(
        [str(real_python), "-m", "faultday.stack.tinymodel", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
        env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "config.json").exists()
    assert (out / "model.safetensors").exists()
    return out


@pytest.fixture
def servers(tiny_model: Path, tmp_path: Path) -> Iterator[Servers]:
    holder = Servers(tiny_model, tmp_path)
    try:
        yield holder
    finally:
        holder.stop_all()


@pytest.fixture
def sim_only(tmp_path: Path) -> Iterator[Servers]:
    holder = Servers(None, tmp_path)
    try:
        yield holder
    finally:
        holder.stop_all()

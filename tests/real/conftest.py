"""Fixtures for the real-vLLM suite (`make test-real`): the tiny model and one server at a time."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.observed import recorder, write_summary
from tests.real.realstack import REAL_PYTHON, ROOT, Servers

from faultday.stack import shm

OBSERVED = pytest.StashKey[dict[str, dict[str, object]]]()
# What real vLLM did, per test: printed at the end of the run and written here
# (git-ignored), so CI logs keep the figures docs/real-vllm.md quotes.
OBSERVED_FILE = ROOT / "reports" / "real-vllm-observed.json"
# An orderly vLLM exit unlinks its shared memory within ~2 s of the engine's death.
SHM_SETTLE_S = 5.0


def _shm_names() -> set[str]:
    try:
        return {n for n in os.listdir(shm.SHM_DIR) if shm.is_python_shm(n)}
    except OSError:
        return set()


@pytest.fixture(autouse=True)
def no_shared_memory_left() -> Iterator[None]:
    """Fail a test after which new psm_*/sem.mp-* are in /dev/shm with no live process mapping them.

    vLLM's message queues are ~400 MB a server; a SIGKILLed process group takes
    the resource tracker that would unlink them down with it. The leftovers are
    removed, so the next test starts clean. (Another suite leaking at the same
    moment on this machine would be reported here too.)
    """
    before = _shm_names()
    yield
    deadline = time.monotonic() + SHM_SETTLE_S
    while (left := shm.orphaned(_shm_names() - before)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        shm.remove_orphaned(left)
        pytest.fail(f"left in /dev/shm with no process mapping them: {sorted(left)}")


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

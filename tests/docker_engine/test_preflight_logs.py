"""Preflight's log scan on a real container: the log is ``docker logs`` output, kept in the folder.

Here, not in tests/preflight: it needs the engine and an image, and ``make test-docker``
fails (rather than skips) without them, so CI cannot pass it by skipping.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.preflight.conftest import component

from faultday.cluster.docker_render import faultday_image
from faultday.core.vocab import Verdict
from faultday.preflight.logs import log_file, scan_log

pytestmark = pytest.mark.docker


def test_a_containers_log_is_read_through_docker_logs_and_kept(engine: Any, tmp_path: Path) -> None:
    name = f"faultday-preflight-logs-{os.getpid()}"
    script = "echo 'INFO up'; echo 'ERROR disk is full' >&2; sleep 120"
    container = engine.containers.run(
        faultday_image(), ["sh", "-c", script], name=name, detach=True
    )
    try:
        comp = component(f"docker logs {name}")

        def saved() -> Path | None:
            path, _ = log_file(comp, folder=tmp_path, max_bytes=1 << 20)
            return path if path is not None and "ERROR" in path.read_text() else None

        path = wait_for(saved, 30, "the container's log")
        errors, _ = scan_log(comp, (), 1 << 20, 3, path=path)
    finally:
        container.remove(force=True)
    assert path == tmp_path / "logs" / "x.log"
    lines = path.read_text().splitlines()
    # The engine reads the container's stdout and stderr on two pipes, so the two lines may be
    # saved in either order; the finding must name the line the error has in the saved file.
    assert sorted(lines) == ["ERROR disk is full", "INFO up"]
    assert errors.verdict == Verdict.FAILED
    line = lines.index("ERROR disk is full") + 1
    assert errors.message == f"{path}:{line}: ERROR disk is full"

"""Fixtures: the load tests' small HTTP server (tests/load/data/okserver.py), on a free port."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.load.conftest import DATA, _serve, free_port


@pytest.fixture
def ok_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    yield from _serve(
        [sys.executable, str(DATA / "okserver.py"), str(port), str(tmp_path)],
        f"http://127.0.0.1:{port}/health",
        tmp_path,
    )

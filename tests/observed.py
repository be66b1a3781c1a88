"""What a test saw on a real engine, kept for the CI log; and polling a value over time.

Shared by tests/real (vLLM on the host) and tests/docker_engine (vLLM in a container):
each conftest keeps its own stash key, title and file, and calls these.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

Store = dict[str, dict[str, object]]


def recorder(request: pytest.FixtureRequest, key: pytest.StashKey[Store]
             ) -> Callable[[str, object], None]:  # fmt: skip
    """A function that records one observed value for the requesting test."""
    mine = request.config.stash.setdefault(key, {}).setdefault(request.node.name, {})

    def record(name: str, value: object) -> None:
        mine[name] = value

    return record


def write_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config,
                  key: pytest.StashKey[Store], title: str, path: Path) -> None:  # fmt: skip
    """Print every recorded value in a section of the summary and write them to ``path``."""
    store = config.stash.get(key, {})
    if not store:
        return
    terminalreporter.section(title)
    for test, values in store.items():
        for name, value in values.items():
            terminalreporter.write_line(f"{test}: {name} = {value}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(store, indent=2, default=str) + "\n", encoding="utf-8")
    terminalreporter.write_line(f"written to {path}")


def poll(fn: Callable[[], object], until: Callable[[object], bool], timeout: float
         ) -> list[tuple[float, object]]:  # fmt: skip
    """Call ``fn`` every 0.1 s until ``until(value)`` or the timeout; return what was seen."""
    seen: list[tuple[float, object]] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = fn()
        seen.append((round(time.monotonic() - t0, 2), value))
        if until(value):
            break
        time.sleep(0.1)
    return seen

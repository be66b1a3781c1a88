"""Fixtures for preflight tests: a stack up for a whole module, found by its state file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.stack.conftest import marked_processes

from faultday.core.ledger import Ledger
from faultday.core.profile import load_profile
from faultday.core.stackinfo import ComponentInfo
from faultday.preflight.runner import STATE_FILE, PreflightOptions, PreflightOutcome, run_preflight
from faultday.stack.stack import Stack

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Running:
    """A stack up for a module, described in a state file as `faultday stack up` leaves it."""

    stack: Stack
    profile: Path
    state_dir: Path
    base: Path

    def preflight(self, report_dir: Path, **kw: Any) -> PreflightOutcome:
        opts = PreflightOptions(
            profile=str(self.profile),
            base_dir=self.base,
            report_dir=report_dir,
            state_dir=self.state_dir,
            **kw,
        )
        return run_preflight(opts)


@contextmanager
def running_stack(profile: Path, folder: Path) -> Iterator[Running]:
    """Start ``profile`` in ``folder``; write its state file; stop it (and check) after."""
    state_dir = folder / "stack"
    stack = Stack(
        load_profile(str(profile), base_dir=folder),
        run_dir=state_dir,
        ledger=Ledger.in_dir(state_dir),
        policy=None,
    )
    try:
        stack.up()
        info = stack.describe()
        (state_dir / STATE_FILE).write_text(json.dumps({"info": info.model_dump(mode="json")}))
        yield Running(stack, profile, state_dir, folder)
    finally:
        stack.down()
        assert not marked_processes(state_dir), "a stack process outlived the module"


def copy_local(folder: Path, *, llm_args: list[str] | None = None, policy_edit: str = "") -> Path:
    """The local profile and its agent policy copied into ``folder/stack``, edited as asked.

    ``llm_args`` are added to llm-primary's command line; ``policy_edit`` is
    ``old=>new``, replaced once in agent.yaml.
    """
    dst = folder / "stack"
    dst.mkdir(parents=True, exist_ok=True)
    text = (REPO / "stack" / "local.yaml").read_text()
    if llm_args:
        old = 'args: ["--model", "sim-primary"]'
        assert text.count(old) == 1
        text = text.replace(old, "args: " + json.dumps(["--model", "sim-primary", *llm_args]))
    (dst / "local.yaml").write_text(text)
    policy = (REPO / "stack" / "agent.yaml").read_text()
    if policy_edit:
        old, new = policy_edit.split("=>")
        assert policy.count(old) == 1, old
        policy = policy.replace(old, new)
    (dst / "agent.yaml").write_text(policy)
    return dst / "local.yaml"


def line_of(path: Path, text: str) -> int:
    """The 1-based number of the first line of ``path`` that contains ``text``."""
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {path}")


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def component(log: str | Path) -> ComponentInfo:
    """A component named ``x`` whose log is ``log`` (a path, or a ``docker logs`` command)."""
    return ComponentInfo(
        name="x",
        type="command",
        url="",
        admin_url="",
        ports={},
        pid=None,
        health="",
        restarts=0,
        log=str(log),
    )

"""The vocabulary: every event the package emits is in the catalogue, with the fields it sends."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import faultday
from faultday.core.journal import JournalWindow
from faultday.core.vocab import CATALOGUE, EventKind, Phase, WindowKind

SRC = Path(faultday.__file__).parent
# Keywords every event takes besides its data fields.
COMMON = {"fault", "target"}


def _event_calls() -> list[tuple[str, ast.Call]]:
    calls = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"event", "_event"}
                and node.args
            ):
                calls.append((f"{path.relative_to(SRC)}:{node.lineno}", node))
    return calls


def _kind(call: ast.Call) -> EventKind | None:
    """The EventKind member a call names; None where it forwards a variable."""
    arg = call.args[0]
    if isinstance(arg, ast.Name):
        return None  # a helper passing its own parameter on
    assert isinstance(call.func, ast.Attribute)
    named = isinstance(arg, ast.Attribute) and ast.unparse(arg.value) == "EventKind"
    if call.func.attr == "_event" and not isinstance(arg, ast.Constant) and not named:
        return None  # another kind of _event (the supervisor's component log)
    assert isinstance(arg, ast.Attribute), f"event kind is not an EventKind: {ast.unparse(arg)}"
    assert isinstance(arg.value, ast.Name) and arg.value.id == "EventKind", ast.unparse(arg)
    return EventKind[arg.attr]


def test_every_emitted_event_is_catalogued_with_its_fields() -> None:
    calls = _event_calls()
    assert len(calls) >= 15  # the scan sees the engine, load, scrape and cluster emitters
    emitted: set[EventKind] = set()
    for where, call in calls:
        kind = _kind(call)
        if kind is None:
            continue
        emitted.add(kind)
        fields = {k.arg for k in call.keywords if k.arg is not None} - COMMON
        missing = fields - set(CATALOGUE[kind].fields)
        assert not missing, f"{where}: {kind} sends {sorted(missing)}, not in the catalogue"
    assert emitted == set(CATALOGUE), f"catalogued but never emitted: {set(CATALOGUE) - emitted}"


def test_the_catalogue_describes_every_kind() -> None:
    assert set(CATALOGUE) == set(EventKind)
    assert all(spec.emitter and spec.when for spec in CATALOGUE.values())


def test_a_journal_refuses_a_window_kind_the_engine_never_writes() -> None:
    with pytest.raises(ValueError, match="kind"):
        JournalWindow(kind="recovery", label="after", start=0, end=1)  # type: ignore[arg-type]
    assert (
        JournalWindow(kind=WindowKind.RECOVERED, label="after", start=0, end=1).kind == "recovered"
    )


def test_phases_are_in_run_order() -> None:
    order = list(Phase)
    assert order.index(Phase.WARMUP) < order.index(Phase.BASELINE) < order.index(Phase.DONE)

"""`faultday lint` on mutated agent policies: a located answer, never a traceback or a hang.

Hypothesis starts from ``stack/agent.yaml`` and breaks one place in a policy: a value
replaced by a random string, a huge, negative or non-finite number, a yes/no, a list or
a mapping; an unknown key added; a key removed. The lint is run in-process as the
command runs it. Whatever it is given, it either finds what it finds (exit 0 or 1, each
finding at a place in the file) or refuses the file with every problem located (exit 2);
anything else, or a case that takes more than a second, fails. It refuses exactly when the
agent's own policy model refuses: a value the agent would not run with is never skipped.
"""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path
from types import FrameType

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tests.conftest import ROOT

from faultday.checks.lint import Severity, lint_file
from faultday.core.exits import ExitCode
from faultday.errors import ScenarioError
from faultday_wire.policy import Policy

BASE = yaml.safe_load((ROOT / "stack" / "agent.yaml").read_text())
BUDGET_S = 1.0  # one lint of this file takes ~5 ms; a second is a hang
GUARD_S = 10  # the timer interrupts a case still running then


def _places(value: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every path under ``policies`` (mappings and leaves alike)."""
    out = [path] if path else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _places(v, (*path, str(k)))
    return out


PLACES = _places(BASE["policies"])

VALUES = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["-2s", "-5s", "1e9s", "three", "2", "0.5x", "nan", "inf", "1e999s", " "]),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=10**300, max_value=10**320),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -1e308, 1e308]),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    data = yaml.safe_load(yaml.safe_dump(BASE))  # a deep copy
    place = draw(st.sampled_from(PLACES))
    parent = data["policies"]
    for part in place[:-1]:
        parent = parent[part]
    how = draw(st.sampled_from(["replace", "add", "remove"]))
    if how == "replace":
        parent[place[-1]] = draw(VALUES)
    elif how == "add":
        target = parent[place[-1]] if isinstance(parent[place[-1]], dict) else parent
        target[draw(st.text(min_size=1, max_size=12))] = draw(VALUES)
    else:
        del parent[place[-1]]
    return f"{how} {'.'.join(place)}", data


class Hang(Exception):
    pass


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang


def _lint_exit(path: Path) -> tuple[ExitCode, list[tuple[int, int]]]:
    """The exit code `faultday lint` would give, and the (line, col) of each thing it says."""
    try:
        found = lint_file(path)
    except ScenarioError as exc:
        return ExitCode.INVALID, [(p.line, p.col) for p in exc.problems]
    errors = [f for f in found if f.severity == Severity.ERROR]
    return (ExitCode.FAILED if errors else ExitCode.PASSED), [(f.line, f.col) for f in found]


@settings(
    max_examples=150,
    deadline=None,  # timed below, with a budget that holds on a busy machine
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: it can take minutes
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=mutated())
def test_a_mutated_policy_gets_a_located_answer(tmp_path: Path, case: tuple[str, dict]) -> None:
    what, data = case
    f = tmp_path / "agent.yaml"
    f.write_text(yaml.safe_dump(data, allow_unicode=True))
    lines = f.read_text().count("\n") + 1
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(GUARD_S)
    start = time.monotonic()
    try:
        code, places = _lint_exit(f)
    except Hang as exc:
        raise AssertionError(f"{what}: still running after {GUARD_S}s") from exc
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - start < BUDGET_S, what
    assert all(1 <= line <= lines and col >= 1 for line, col in places), (what, places)
    if code == ExitCode.INVALID:
        assert places, f"{what}: a refusal names at least one problem"
    # The oracle is the agent's own model: what it refuses the lint refuses (never skips),
    # and what it takes the lint judges.
    assert (code == ExitCode.INVALID) == _agent_refuses(data["policies"]), (what, code)


def _agent_refuses(policies: object) -> bool:
    if not isinstance(policies, dict) or not policies:
        return True
    try:
        for value in policies.values():
            Policy.model_validate(value)
    except ValidationError:
        return True
    return False

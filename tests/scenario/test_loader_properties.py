"""The scenario loader on mutated scenarios: a clean load or located problems, nothing else.

Hypothesis starts from scenarios in ``scenarios/`` (the soak, a canary rollout, a GPU
hang, a retry storm, a capacity ramp) and breaks one place: a value replaced by a random
string, a huge, negative or non-finite number, a yes/no, a list or a mapping, or a
duration-like text (``-5s``, ``1e9s``, ``nans``); an unknown key added; a key removed.
The loader, with the stack profiles' target resolver as ``faultday validate`` uses it,
must either load the file or raise ScenarioError whose every problem names this file
and a line and column inside it; any other exception, or a case slower than a second,
fails.
"""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path
from types import FrameType

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import ROOT

from faultday.errors import ScenarioError
from faultday.scenario.loader import load_scenario
from faultday.session import target_resolver
from faultday_wire.problems import Problem

SOURCES = [
    "soak",
    "model-rollout-canary",
    "gpu-hang",
    "retry-storm",
    "capacity-ramp",
]
BASES = {
    name: yaml.safe_load((ROOT / "scenarios" / f"{name}.scenario.yaml").read_text())
    for name in SOURCES
}
BUDGET_S = 1.0  # one load takes ~10-50 ms here; a second is a hang
GUARD_S = 10  # the timer interrupts a case still running then

Place = tuple[str | int, ...]


def _places(value: object, path: Place = ()) -> list[Place]:
    """Every path in the document: mappings, list items and leaves alike."""
    out = [path] if path else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _places(v, (*path, str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _places(v, (*path, i))
    return out


PLACES = [(name, place) for name, base in BASES.items() for place in _places(base)]

VALUES = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "-5s",
            "1e9s",
            "1e999MiB/min",
            "-5MiB/min",
            "nans",
            "99999999h",
            "1ms",
            "0s",
            "nonexistent",
            "agent->nowhere",
            "soak",
            "drift",
            "",
            " ",
        ]
    ),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=10**300, max_value=10**320),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -1e308, 1e308, 0, -1]),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, object]:
    name, place = draw(st.sampled_from(PLACES))
    data = yaml.safe_load(yaml.safe_dump(BASES[name]))  # a deep copy
    parent = data
    for part in place[:-1]:
        parent = parent[part]
    key = place[-1]
    how = draw(st.sampled_from(["replace", "add", "remove"]))
    if how == "replace":
        parent[key] = draw(VALUES)
    elif how == "add":
        inside = parent[key]
        if isinstance(inside, dict):
            inside[draw(st.text(min_size=1, max_size=12))] = draw(VALUES)
        elif isinstance(inside, list):
            inside.append(draw(VALUES))
        else:
            parent[key] = [inside, draw(VALUES)]
    else:
        del parent[key]
    return f"{name}: {how} {'.'.join(map(str, place))}", data


class Hang(Exception):
    pass


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mutated") / "case.scenario.yaml"


@settings(
    max_examples=150,
    deadline=None,  # the budget below is the bound; a deadline flakes on a busy box
    database=None,  # no .hypothesis/ folder left in the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=mutated())
def test_a_mutated_scenario_loads_or_every_problem_is_located(
    case: tuple[str, object], scratch: Path
) -> None:
    what, data = case
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    scratch.write_text(text, encoding="utf-8")
    lines = text.count("\n") + 1
    started = time.monotonic()
    problems = _load(scratch, what)
    took = time.monotonic() - started
    assert took < BUDGET_S, f"{what}: {took:.2f}s"
    for p in problems:
        assert p.file == str(scratch), (what, str(p))
        assert 1 <= p.line <= lines, (what, str(p))
        assert p.col >= 1, (what, str(p))
        assert p.message, (what, str(p))


def _load(path: Path, what: str) -> list[Problem]:
    """The problems ``faultday validate`` reports (none: it loads), under a timer."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(GUARD_S)
    try:
        load_scenario(path, resolve_targets=target_resolver(ROOT))
    except ScenarioError as exc:
        if not exc.problems:
            pytest.fail(f"{what}: a ScenarioError without a problem")
        return exc.problems
    except Hang:
        pytest.fail(f"{what}: still loading after {GUARD_S}s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return []

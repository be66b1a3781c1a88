"""A soak that could never measure anything fails ``faultday validate``, every problem at once.

Issue 32.3: an infinite, negative or unit-less ``max_slope``, a drift ``target`` the stack
does not have, a ``sample_interval`` that takes no sample in the run and a run too short
for a slope all validated as ``ok``. The one-mistake files are in ``broken/``
(``soak-*``); here, all of them in one file, the bounds exactly, and the duration
messages of issue 32.6.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
from pydantic import TypeAdapter, ValidationError
from tests.conftest import ROOT, faultday

from faultday.core.durations import parse_duration
from faultday.core.types import at_most
from faultday.errors import ScenarioError
from faultday.scenario.loader import load_scenario
from faultday.session import target_resolver

SOAK = ROOT / "scenarios" / "soak.scenario.yaml"


def _soak(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    text = SOAK.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "soak.scenario.yaml"
    path.write_text(text)
    return path


def _problems(path: Path) -> list[str]:
    try:
        load_scenario(path, resolve_targets=target_resolver(ROOT))
    except ScenarioError as exc:
        return [str(p) for p in exc.problems]
    return []


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_the_shipped_soak_validates() -> None:
    assert _problems(SOAK) == []


def test_every_soak_problem_is_reported_at_once_with_its_place(tmp_path: Path) -> None:
    path = _soak(
        tmp_path,
        ("target: agent, max_slope: 20MiB/min", "target: nonexistent, max_slope: -5MiB/min"),
        ("max_slope: 30/min", "max_slope: 20"),
        ("max_slope: 2s/min", "max_slope: 1e999s/min"),
        ("sample_interval: 5s", "sample_interval: 99999999h"),
    )
    problems = _problems(path)
    wanted = {
        "nonexistent": "spec.expect[1].target: 'nonexistent' is no component of the stack",
        "-5MiB/min": "spec.expect[1].max_slope: max_slope '-5MiB/min' is not above zero",
        "max_slope: 20}": "spec.expect[2].max_slope: max_slope 20 has no unit",
        "1e999s/min": "spec.expect[3].max_slope: max_slope '1e999s/min' is too large",
        "99999999h": "spec.load.sample_interval: the run (5m) holds at most 1 sample",
    }
    for where, message in wanted.items():
        line = _line_of(path, where)
        assert any(f":{line}:" in p and message in p for p in problems), (message, problems)
    assert len(problems) == len(wanted), problems


def test_the_validate_command_exits_2_and_names_each_place(tmp_path: Path) -> None:
    path = _soak(tmp_path, ("duration: 5m", "duration: 1ms"))
    r = faultday("validate", str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    line = _line_of(path, "duration: 1ms")
    assert f"{path}:{line}:13: spec.duration: 1ms is too short for a slope" in r.stderr
    assert "it takes a run of at least 200s (4 more drift checks too)" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("interval", "ok"),
    [("33s", True), ("33.333s", True), ("33.334s", False), ("34s", False)],
)
def test_the_sample_interval_bound_is_exact(tmp_path: Path, interval: str, ok: bool) -> None:
    # 5m sampled every 33.333s: samples at 0 .. 299.997 s, ten of them; min_points is 10.
    path = _soak(
        tmp_path,
        ("sample_interval: 5s", f"sample_interval: {interval}"),
        ("interval: 20s}", "interval: 20s, min_points: 3}"),
        ("interval: 20s}", "interval: 20s, min_points: 3}"),
    )
    problems = _problems(path)
    assert (problems == []) == ok, problems
    if not ok:
        assert "a sample_interval of at most 33.333s" in problems[0]


def test_a_fault_window_too_short_for_a_slope_is_named(tmp_path: Path) -> None:
    path = _soak(
        tmp_path,
        (
            "  expect:\n",
            "  faults:\n    - {name: f, inject: process_pause, target: tools, "
            "at: 10s, duration: 20s}\n  expect:\n",
        ),
        (
            "{check: drift, series: rss, target: agent",
            "{during: f, check: drift, series: rss, target: agent",
        ),
    )
    problems = _problems(path)
    assert len(problems) == 1, problems
    assert (
        "spec.load.sample_interval: the window during fault 'f' (20s) holds at most 5 samples"
        in (problems[0])
    )
    assert "a sample_interval of at most 2.222s, or a window of at least 45s" in problems[0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-5s", "'-5s' is negative; a duration is 0 or more"),
        ("1e9s", "exponent notation is not accepted; write 1000000000s"),
        ("1e40s", "'1e40s' is too large: written out it has more than 32 characters"),
        ("nans", "'nans' is not a number"),
        ("infs", "'infs' is too large"),
        ("abcs", "'abcs' is not a duration: 'abc' is not a number"),
        ("20 sec", "unit 'sec' is not one of us, ms, s, m or h"),
        ("20", "it has no unit"),
        ("s", "the number is missing"),
        ("+5s", "write it without a sign"),
        ("٢٠s", "is not a number in ASCII digits (0-9)"),
    ],
)
def test_a_duration_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1e9s", "'1e9s' is too large: the maximum is 168h"),
        ("169h", "'169h' is too large: the maximum is 168h"),
        ("-5s", "is negative"),
        (float("nan"), "nan is not a number"),
        (-5, "-5 is negative"),
        (10**400, "has no unit"),  # past a float's range: once an OverflowError
        (-(10**400), "is negative"),
    ],
)
def test_a_bounded_duration_names_its_maximum(text: object, message: str) -> None:
    run_length = TypeAdapter(Annotated[float, at_most("168h")])
    with pytest.raises(ValidationError, match=message):
        run_length.validate_python(text)
    assert run_length.validate_python("168h") == 168 * 3600


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("spawn_rate: 8", "spawn_rate: .inf"),
            "spec.load.spawn_rate: .inf is infinite (or too large for a number); "
            "expected a finite number > 0 and ≤ 10000",
        ),
        (
            ("max_slope: 2%/min", "max_slope: 2%/min, confidence: .nan"),
            "spec.expect[4].confidence: .nan is not a number; expected a finite number",
        ),
    ],
)
def test_a_nan_or_an_infinity_says_so(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    # Issue 32.6: pydantic said "should be less than or equal to 1" of a NaN.
    problems = _problems(_soak(tmp_path, edit))
    assert len(problems) == 1, problems
    assert message in problems[0]

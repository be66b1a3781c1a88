"""`faultday lint` on agent policy files: each contradiction with file:line and a fix; a value
that does not parse is exit 2 with its position and what would be valid (issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import ROOT, faultday

from faultday.checks.lint import BEFORE_THE_ANSWER, Severity, lint_file
from faultday.core.exits import ExitCode
from faultday.errors import ScenarioError
from faultday_wire.durations import UNITS_HINT
from faultday_wire.policy import MAX_ATTEMPTS

AGENT_YAML = ROOT / "stack" / "agent.yaml"

ADMISSION = "    admission: {max_in_flight: 8, max_queue: 8, queue_timeout: 1s, retry_after: 1s}\n"
BAD = (
    """version: 1
policies:
  default:
    timeouts: {model_call: 2s, tool_call: 90s, task: 60s, request: 6s, redis: 250ms,
               embed: 1s, vector: 2s, wait: 30s}
    retries: {attempts: 4, backoff_initial: 0ms, backoff_max: 0ms, jitter: 0ms, budget_ratio: 0.2}
    breakers: {enabled: false}
    fallback: false
"""
    + ADMISSION
    + """  good:
    timeouts: {model_call: 1s, tool_call: 2s, task: 60s, request: 6s, redis: 100ms,
               embed: 500ms, vector: 500ms, wait: 30s}
    retries: {attempts: 2, backoff_initial: 50ms, backoff_max: 500ms, jitter: 50ms, budget_ratio: 0.2}
    breakers: {enabled: true, threshold: 3, reset_after: 3s}
    fallback: true
"""
    + ADMISSION
)


def test_each_contradiction_has_a_line_and_a_fix(tmp_path: Path) -> None:
    f = tmp_path / "agent.yaml"
    f.write_text(BAD)
    found = lint_file(f)
    by_path = {(x.path, x.severity): x for x in found}
    tool = by_path[("policies.default.timeouts.tool_call", Severity.ERROR)]
    assert tool.line == 4 and "tool_call timeout (90s) ≥ its task timeout (60s)" in tool.message
    assert "the agent refuses this" in tool.message
    retry = [x for x in found if x.path == "policies.default.retries.attempts"]
    # vector: 4 x 2s = 8s before the model call, in a 6s request; tools: 4 x 90s in a 60s task.
    assert [x.message.split(":")[0] for x in retry] == ["tools", "vector"]
    assert all(x.line == 6 for x in retry)
    assert "fewer attempts (≤ 2)" in retry[1].fix
    assert "fewer attempts" not in retry[0].fix  # not even one tool call fits
    assert by_path[("policies.default.retries.backoff_initial", Severity.WARNING)].line == 6
    assert by_path[("policies.default.retries.jitter", Severity.WARNING)]
    assert by_path[("policies.default.breakers.enabled", Severity.WARNING)].line == 7
    assert by_path[("policies.default.fallback", Severity.WARNING)].line == 8
    assert not [x for x in found if x.path.startswith("policies.good")]
    assert all(x.fix for x in found)


def test_lint_command_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "agent.yaml"
    bad.write_text(BAD)
    r = faultday("lint", str(bad))
    assert r.returncode == ExitCode.FAILED
    assert f"{bad}:4:" in r.stdout and "fix:" in r.stdout
    good = tmp_path / "good.yaml"
    good.write_text("version: 1\npolicies:\n  good:\n" + BAD.split("  good:\n")[1])
    r = faultday("lint", str(good))
    assert r.returncode == ExitCode.PASSED, r.stdout
    assert "0 errors, 0 warnings" in r.stdout


def test_the_reference_policy_is_clean_and_naive_is_not() -> None:
    # Issue 32.7: the lint added attempts x model_call + backoff (6.15s) and called it beyond
    # the 6s request budget; the agent caps every attempt at the request's remaining deadline
    # (resilience.Deadline), so the default policy never outlasts its budget.
    found = lint_file(AGENT_YAML)
    assert not [f for f in found if f.path.startswith("policies.default.")]
    errors = [f for f in found if f.severity == Severity.ERROR]
    assert errors and all(f.path.startswith("policies.naive.") for f in errors)
    # What naive really does wrong: a hung Redis, embedder or vector store (or tool) takes
    # the whole budget, and nothing is left for the model call that answers.
    assert {f.message.split(":")[0] for f in errors} == set(BEFORE_THE_ANSWER)
    r = faultday("lint", "stack/agent.yaml")
    assert r.returncode == ExitCode.FAILED
    assert "policies.default" not in r.stdout
    assert "4 errors" in r.stdout


def test_an_llm_call_cut_by_the_deadline_is_no_error(tmp_path: Path) -> None:
    text = AGENT_YAML.read_text().replace("attempts: 3,", f"attempts: {MAX_ATTEMPTS},", 1)
    f = tmp_path / "agent.yaml"
    f.write_text(text)
    llm = [x for x in lint_file(f) if x.message.startswith("llm")]
    assert llm == []


def _located(path: Path, needle: str) -> str:
    """``file:line:col`` of the value right after ``needle`` (a ``key: `` prefix)."""
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            return f"{path}:{n}:{line.index(needle) + len(needle) + 1}"
    raise AssertionError(needle)


# (edit of stack/agent.yaml's default policy, the key before the value, words the message says)
BROKEN = [
    ("model_call: 2s,=>model_call: -2s,", "model_call: ", "'-2s' is negative"),
    ("model_call: 2s,=>model_call: -5s,", "model_call: ", "'-5s' is negative"),
    ("model_call: 2s,=>model_call: 1e9s,", "model_call: ", "'1e9s' is too large"),
    ("model_call: 2s,=>model_call: 100000h,", "model_call: ", "is too large"),
    ("model_call: 2s,=>model_call: 2,", "model_call: ", "2 has no unit"),
    ("model_call: 2s,=>model_call: .nan,", "model_call: ", "nan is not a number"),
    ("attempts: 3,=>attempts: three,", "attempts: ", "'three' is not a number"),
    ("attempts: 3,=>attempts: 1100,", "attempts: ", "1100 is too large"),
    ("attempts: 3,=>attempts: 0,", "attempts: ", "0 is too small"),
    ("attempts: 3,=>attempts: true,", "attempts: ", "True is not a number"),
    ("attempts: 3,=>attempts: 2.5,", "attempts: ", "2.5 is not a whole number"),
    ("budget_ratio: 0.2=>budget_ratio: .nan", "budget_ratio: ", "nan is not a number"),
    ("budget_ratio: 0.2=>budget_ratio: .inf", "budget_ratio: ", "inf is too large"),
    ("budget_ratio: 0.2=>budget_ratio: high", "budget_ratio: ", "'high' is not a number"),
    # An int past a float's range: math.isnan() on it raised OverflowError (found by
    # test_lint_properties.py).
    ("budget_ratio: 0.2=>budget_ratio: 1" + "0" * 400, "budget_ratio: ", "is too large"),
    ("threshold: 3,=>threshold: 3, colour: red,", "colour", "unknown key"),
]


@pytest.mark.parametrize(
    ("edit", "key", "says"), BROKEN, ids=[b[0].split("=>")[1][:30] for b in BROKEN]
)
def test_a_value_that_does_not_parse_is_exit_2_at_its_place(
    tmp_path: Path, edit: str, key: str, says: str
) -> None:
    old, new = edit.split("=>")
    text = AGENT_YAML.read_text()
    assert text.count(old) >= 1
    f = tmp_path / "agent.yaml"
    f.write_text(text.replace(old, new, 1))
    with pytest.raises(ScenarioError) as caught:
        lint_file(f)
    where = _located(f, key) if key.endswith(": ") else ""
    [problem] = caught.value.problems
    assert says in problem.message
    assert problem.path.startswith("policies.default.")
    if where:
        assert f"{problem.file}:{problem.line}:{problem.col}" == where


@pytest.mark.parametrize(("edit", "key", "says"), [BROKEN[0], BROKEN[6], BROKEN[7], BROKEN[11]])
def test_the_command_says_where_and_exits_2(tmp_path: Path, edit: str, key: str, says: str) -> None:
    old, new = edit.split("=>")
    f = tmp_path / "agent.yaml"
    f.write_text(AGENT_YAML.read_text().replace(old, new, 1))
    r = faultday("lint", str(f))
    assert r.returncode == ExitCode.INVALID, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert f"{_located(f, key)}: policies.default." in r.stderr and says in r.stderr
    # What would be valid: "expected …"; a negative duration names the grammar instead.
    assert "expected" in r.stderr or UNITS_HINT in r.stderr

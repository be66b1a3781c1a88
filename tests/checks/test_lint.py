"""`faultday lint` on agent policy files: each contradiction with file:line and a fix."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import faultday

from faultday.checks.lint import Severity, lint_file

BAD = """version: 1
policies:
  default:
    timeouts: {model_call: 2s, tool_call: 90s, task: 60s, request: 6s, redis: 250ms,
               embed: 1s, vector: 1s, wait: 30s}
    retries: {attempts: 4, backoff_initial: 0ms, backoff_max: 0ms, jitter: 0ms, budget_ratio: 0.2}
    breakers: {enabled: false}
    fallback: false
  good:
    timeouts: {model_call: 1s, tool_call: 2s, task: 60s, request: 6s, redis: 100ms,
               embed: 500ms, vector: 500ms, wait: 30s}
    retries: {attempts: 2, backoff_initial: 50ms, backoff_max: 500ms, jitter: 50ms, budget_ratio: 0.2}
    breakers: {enabled: true, threshold: 3, reset_after: 3s}
    fallback: true
"""


def test_each_contradiction_has_a_line_and_a_fix(tmp_path: Path) -> None:
    f = tmp_path / "agent.yaml"
    f.write_text(BAD)
    found = lint_file(f)
    by_path = {(x.path, x.severity): x for x in found}
    tool = by_path[("policies.default.timeouts.tool_call", Severity.ERROR)]
    assert tool.line == 4 and "tool_call timeout (90s) ≥ its task timeout (1m)" in tool.message
    retry = [x for x in found if x.path == "policies.default.retries.attempts"]
    assert retry and retry[0].line == 6 and "llm: 4 attempts x 2s" in retry[0].message
    assert "fewer attempts (≤ 3)" in retry[0].fix
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
    assert r.returncode == 1
    assert f"{bad}:4:" in r.stdout and "fix:" in r.stdout
    good = tmp_path / "good.yaml"
    good.write_text(
        BAD.split("  good:\n", maxsplit=1)[0].split("policies:", maxsplit=1)[0]
        + "policies:\n  good:\n"
        + BAD.split("  good:\n")[1]
    )
    r = faultday("lint", str(good))
    assert r.returncode == 0, r.stdout
    assert "0 errors, 0 warnings" in r.stdout

"""Preflight's configuration check reads the agent policy with the agent's own model
(issue 32): a value that does not parse is exit 2 with its position, before any stack
starts; a policy that parses is linted (``lint_accept`` taking an error, with a reason).
No stack runs here: the configuration half needs only the profile and its files."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import faultday
from tests.preflight.conftest import component, copy_local, line_of

from faultday.core.exits import ExitCode
from faultday.core.preflight import LintAccept, PreflightSpec
from faultday.core.profile import load_profile
from faultday.core.stackinfo import StackInfo
from faultday.core.vocab import Verdict
from faultday.preflight.base import Subject
from faultday.preflight.config import check_config


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        ("model_call: 2s,=>model_call: -2s,", "'-2s' is negative"),
        ("attempts: 3,=>attempts: three,", "'three' is not a number"),
        ("attempts: 3,=>attempts: 1100,", "1100 is too large"),  # was an OverflowError, exit 4
        ("budget_ratio: 0.2=>budget_ratio: .nan", "nan is not a number"),
        ("tool_call: 3s, task: 60s=>tool_call: 90s, task: 60s", "the agent refuses this"),
        # preflight reads models.max_tokens too (the KV-cache probe): with the agent's model
        ("max_tokens: 96=>max_tokens: 1000000", "is too large; expected a whole number from 1"),
    ],
)
def test_a_policy_the_agent_would_refuse_is_exit_2_before_any_stack(
    tmp_path: Path, edit: str, says: str
) -> None:
    profile = copy_local(tmp_path, policy_edit=edit)
    policy = profile.parent / "agent.yaml"
    reports = tmp_path / "reports"
    r = faultday("preflight", "--profile", str(profile), "--report-dir", str(reports), cwd=tmp_path)
    assert r.returncode == ExitCode.INVALID, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    line = line_of(policy, edit.split("=>")[1])
    assert f"{policy}:{line}:" in r.stderr
    assert "policies.default." in r.stderr or "models.max_tokens" in r.stderr
    assert says in r.stderr
    assert not reports.exists()  # nothing started, nothing written
    assert not (tmp_path / "stack" / "run").exists()


def _subject(tmp_path: Path, *, policy: str, accept: tuple[LintAccept, ...] = ()) -> Subject:
    profile_file = copy_local(tmp_path)
    profile = load_profile(str(profile_file), base_dir=tmp_path)
    agent = component(tmp_path / "agent.log").model_copy(update={"name": "agent", "type": "agent"})
    info = StackInfo(
        profile="local",
        source=str(profile_file),
        run_dir=str(tmp_path),
        policy=policy,
        components=(agent,),
        edges=(),
    )
    spec = PreflightSpec(lint_accept=accept)
    return Subject(profile=profile, info=info, spec=spec, base_dir=tmp_path, folder=tmp_path)


def test_the_reference_policy_passes_the_config_check(tmp_path: Path) -> None:
    checks = check_config(_subject(tmp_path, policy="default"))
    assert [(c.check, c.verdict) for c in checks] == [
        ("lint", Verdict.PASSED),
        ("timeouts", Verdict.PASSED),
    ]
    assert checks[0].observed == "0 errors, 0 warnings"


def test_naive_fails_the_lint_unless_accepted_with_a_reason(tmp_path: Path) -> None:
    lint = check_config(_subject(tmp_path / "a", policy="naive"))[0]
    assert lint.verdict == Verdict.FAILED
    assert lint.observed.startswith("4 errors")
    assert "policies.naive.retries.attempts: redis:" in lint.message
    why = "a game day that shows what naive retries do"
    accept = (LintAccept(path="policies.naive.retries.attempts", why=why),)
    lint = check_config(_subject(tmp_path / "b", policy="naive", accept=accept))[0]
    assert lint.verdict == Verdict.PASSED
    assert lint.observed == "0 errors, 5 warnings, 4 accepted"
    assert why in lint.message

"""`faultday preflight` on a stack with three problems names each one and where it is.

One stack for the module, the local profile with: llm-primary started with a
``--max-model-len`` too short for the workload, an agent policy whose tool timeout
exceeds its request budget, and llm-backup logging an error (a corrected ECC error
the simulated GPU reports, as real vLLM's host log shows an Xid).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import faultday
from tests.preflight.conftest import Running, copy_local, line_of, running_stack

from faultday.core.journal import JournalCheck, RunVerdict
from faultday.core.vocab import Verdict
from faultday.preflight.runner import PreflightOutcome

SHORT = 1024  # < 2048-token prompts + 192 tokens (the policy's canary budget)


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    folder = tmp_path_factory.mktemp("pf-broken")
    profile = copy_local(
        folder,
        llm_args=["--max-model-len", str(SHORT)],
        policy_edit="tool_call: 3s, task: 60s=>tool_call: 8s, task: 60s",
    )
    with running_stack(profile, folder) as r:
        backup = r.stack.target("llm-backup").url
        httpx.post(f"{backup}/admin/faults", json={"kind": "ecc_sbe"}, timeout=5).raise_for_status()
        httpx.delete(f"{backup}/admin/faults", timeout=5).raise_for_status()
        yield r


@pytest.fixture(scope="module")
def outcome(broken: Running, tmp_path_factory: pytest.TempPathFactory) -> PreflightOutcome:
    return broken.preflight(tmp_path_factory.mktemp("pf-broken-report"))


def _failed(outcome: PreflightOutcome) -> dict[str, JournalCheck]:
    return {c.label: c for c in outcome.journal.checks if c.verdict == Verdict.FAILED}


def test_it_fails_on_exactly_the_three_problems(outcome: PreflightOutcome) -> None:
    assert outcome.journal.verdict == RunVerdict.FAILED
    failed = _failed(outcome)
    assert set(failed) == {
        "llm-primary: max_model_len",
        "agent: policy 'default' in agent.yaml: timeout hierarchy",
        "llm-backup: error-level lines",
    }, failed


def test_max_model_len_names_the_profile_field(broken: Running, outcome: PreflightOutcome) -> None:
    c = _failed(outcome)["llm-primary: max_model_len"]
    assert c.observed == str(SHORT)
    assert c.expected.startswith("≥ 2240")
    line = line_of(broken.profile, "--max-model-len")
    assert f"{broken.profile}:{line}:" in c.message
    assert "spec.components.llm-primary.args[3]" in c.message


def test_the_timeout_hierarchy_names_the_policy_field(
    broken: Running, outcome: PreflightOutcome
) -> None:
    c = _failed(outcome)["agent: policy 'default' in agent.yaml: timeout hierarchy"]
    policy = broken.profile.parent / "agent.yaml"
    line = line_of(policy, "tool_call: 8s")
    assert f"{policy}:{line}:" in c.message
    assert "policies.default.timeouts.tool_call" in c.message
    assert "tool_call (8s) ≥ the request budget (6s)" in c.message


def test_the_error_line_is_named_by_file_and_line(
    broken: Running, outcome: PreflightOutcome
) -> None:
    c = _failed(outcome)["llm-backup: error-level lines"]
    log = broken.stack.log_path("llm-backup")
    line = line_of(log, "ERROR")
    assert f"{log}:{line}: ERROR" in c.message
    assert c.observed == "1 line"


def test_the_command_exits_1_and_prints_each_place(broken: Running, tmp_path: Path) -> None:
    r = faultday(
        "preflight",
        "--profile",
        str(broken.profile),
        "--state-dir",
        str(broken.state_dir),
        "--report-dir",
        str(tmp_path),
    )
    assert r.returncode == 1, r.stderr
    err = " ".join(r.stderr.split())  # rich wraps long lines
    assert "PREFLIGHT FAILED" in err
    assert "spec.components.llm-primary.args[3]" in err
    assert "policies.default.timeouts.tool_call" in err
    assert f"{broken.stack.log_path('llm-backup')}:" in err


def test_the_reports_list_each_problem_with_where_it_is(
    broken: Running, outcome: PreflightOutcome
) -> None:
    md = (outcome.run_dir / "report.md").read_text()
    html = (outcome.run_dir / "report.html").read_text()
    assert md.startswith("# Preflight of stack local — FAILED")
    problems = md[md.index("## Problems") : md.index("## Config")]
    assert problems.count("\n- **") == 3
    assert "spec.components.llm-primary.args\\[3\\]" in problems  # Markdown-escaped
    assert 'id="problem-list"' in html and html.count("<li><strong>") == 3
    assert "policies.default.timeouts.tool_call" in html
    assert "Impact" not in html  # the run report's load sections mean nothing here

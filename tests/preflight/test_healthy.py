"""`faultday preflight` on the healthy local stack: it passes, and says so in every format.

One stack for the module (the start is the slow part); every test reads it through the
state file, as `faultday preflight` finds a stack `faultday stack up` started.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import faultday
from tests.preflight.conftest import REPO, Running, running_stack

from faultday.core.vocab import Section, Verdict
from faultday.preflight.base import Area


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with running_stack(REPO / "stack" / "local.yaml", tmp_path_factory.mktemp("pf-ok")) as r:
        yield r


def test_the_healthy_local_stack_passes_every_area(healthy: Running, tmp_path: Path) -> None:
    outcome = healthy.preflight(tmp_path)
    j = outcome.journal
    bad = [f"{c.window}: {c.label}: {c.observed} {c.message}" for c in outcome.problems()]
    assert outcome.passed, bad
    assert {c.section for c in j.checks} == {Section.PREFLIGHT}
    by_area = {a: [c for c in j.checks if c.window == a] for a in Area}
    assert all(by_area.values()), "every area has checks"
    labels = {c.label for c in j.checks}
    # Golden requests: streaming and not, a tool call, an embedding, a known retrieval result.
    for want in (
        "llm-primary: chat",
        "llm-primary: chat-stream (stream)",
        "llm-primary: tool-call",
        "triton: embed",
        "agent: rag",
        "redis: ping",
        "llm-primary: max_model_len",
        "llm-primary: KV cache at 8 concurrent requests",
        "agent: error-level lines",
    ):
        assert want in labels
    logs = [c for c in j.checks if c.window == Area.LOGS]
    assert all(c.n > 0 for c in logs), "every component's log was read"
    kv = next(c for c in j.checks if c.check == "kv_cache" and c.label.startswith("llm-primary"))
    assert kv.verdict == Verdict.PASSED and kv.observed.startswith("peak ")
    # The default policy lints clean: the lint knows the agent caps every attempt at the
    # request's remaining deadline (issue 32.7), so the profile accepts nothing.
    lint = next(c for c in j.checks if c.check == "lint")
    assert lint.verdict == Verdict.PASSED and lint.observed == "0 errors, 0 warnings"
    for name in ("journal.json", "report.md", "report.html", "junit.xml"):
        assert (outcome.run_dir / name).is_file()
    suite = ET.parse(outcome.run_dir / "junit.xml").getroot()
    assert suite.get("failures") == "0" and int(suite.get("tests", "0")) == len(j.checks)
    html = (outcome.run_dir / "report.html").read_text()
    assert "None: the stack is fit for a game day" in html and "_style" not in html
    # `faultday report` renders a preflight's folder again with the preflight's page.
    (outcome.run_dir / "report.md").unlink()
    r = faultday("report", str(outcome.run_dir))
    assert r.returncode == 0, r.stderr
    assert (outcome.run_dir / "report.md").read_text().startswith("# Preflight of stack local")


def test_the_command_exits_0_on_the_running_stack(healthy: Running, tmp_path: Path) -> None:
    r = faultday(
        "preflight",
        "--profile",
        str(healthy.profile),
        "--state-dir",
        str(healthy.state_dir),
        "--report-dir",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert "PREFLIGHT PASSED" in r.stderr
    assert "report.html" in r.stdout


def test_a_golden_request_of_a_preflight_file_that_fails_is_named(
    healthy: Running, tmp_path: Path
) -> None:
    f = tmp_path / "strict.preflight.yaml"
    f.write_text(
        "apiVersion: faultday/v1\nkind: Preflight\nspec:\n"
        "  skip: [chat, chat-stream, tool-call, models, embed, collection, ping, version, health]\n"
        "  golden:\n"
        "    - name: rag\n"  # replaces the default: a document the corpus does not hold
        "      component: agent\n"
        "      method: POST\n"
        "      path: /v1/chat\n"
        "      body: {session_id: t, message: what does xid 79 mean, rag: true}\n"
        "      expect: {json_path: sources, contains: ['999']}\n"
    )
    r = faultday(
        "preflight",
        "--profile",
        str(healthy.profile),
        "--state-dir",
        str(healthy.state_dir),
        "--config",
        str(f),
        "--report-dir",
        str(tmp_path),
    )
    assert r.returncode == 1, r.stderr
    assert "agent: rag" in r.stderr
    assert "sources lacks '999'" in r.stderr
    assert "/v1/chat" in r.stderr

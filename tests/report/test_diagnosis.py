"""Every diagnosis rule on recorded runs: one where it must fire, one where it must not."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.report import traced
from tests.report.telemetry import check, phase, record_run

from faultday.core.journal import Journal
from faultday.core.vocab import Verdict
from faultday.errors import ScenarioError
from faultday.report.diagnosis import Diagnosis, default_rules, diagnose, parse_rules
from faultday.report.render import render_all
from faultday.report.series import read_series

VERSION_LOG = (
    "INFO starting engine\n"
    "RuntimeError: CUDA driver version is insufficient for CUDA runtime version\n"
)


@dataclass(frozen=True)
class Case:
    """A run where the rule must fire and a near miss where it must not."""

    fires: Callable[[Path], Journal]
    quiet: Callable[[Path], Journal]


THROTTLED = phase(gpu_sm_clock=660.0, gpu_power=250.0, gpu_thermal_ns=1e9, gpu_temp=88.0)
SLOW = {"load_e2e": 0.9}

CASES: dict[str, Case] = {
    "engine-start-version-mismatch": Case(
        fires=lambda d: record_run(
            d,
            errors=["stack-up: llm-primary did not become ready within 120s"],
            logs={"llm-primary": VERSION_LOG},
        ),
        # The same warning in a log of a run whose stack came up is not a failed start.
        quiet=lambda d: record_run(d, logs={"triton": VERSION_LOG}),
    ),
    "high-latency-batching-or-cache": Case(
        fires=lambda d: record_run(d, fault=phase(**SLOW, gpu_waiting=6.0)),
        quiet=lambda d: record_run(d, fault=phase(**SLOW, gpu_sm_clock=660.0, gpu_waiting=6.0)),
    ),
    "multi-gpu-communication-timeout": Case(
        fires=lambda d: record_run(d, fault=phase(load_error=0.2, gpu_xid=74)),
        quiet=lambda d: record_run(d, fault=phase(load_error=0.2)),
    ),
    "gpu-memory-overflow": Case(
        fires=lambda d: record_run(
            d, fault=phase(**SLOW, gpu_fb_used=70000.0, gpu_fb_free=10000.0)
        ),
        quiet=lambda d: record_run(d, fault=phase(**SLOW)),
    ),
    "throughput-drop-throttling": Case(
        fires=lambda d: record_run(d, fault=THROTTLED),
        # Lower clocks without any throttle counter rising: the driver idling, not throttling.
        quiet=lambda d: record_run(d, fault=phase(gpu_sm_clock=660.0, gpu_util=5.0)),
    ),
    "gpu-lost-xid": Case(
        fires=lambda d: record_run(d, fault=phase(gpu_xid=79, load_error=0.3)),
        quiet=lambda d: record_run(d, fault=phase(load_error=0.3)),
    ),
    "hung-engine-health-ok": Case(
        fires=lambda d: record_run(d, fault=phase(gpu_util=100.0, gpu_tokens=0.0)),
        # No tokens because the replica is gone (its /metrics does not answer): not a hang.
        quiet=lambda d: record_run(d, fault=phase(gpu_util=100.0, gpu_tokens=0.0, gpu_up=False)),
    ),
    "retry-storm": Case(
        fires=lambda d: record_run(d, fault=phase(agent_proxy_per_request=5.0, load_error=0.1)),
        quiet=lambda d: record_run(d, fault=phase(load_error=0.1)),
    ),
    "breaker-flapping": Case(
        fires=lambda d: record_run(d, fault=phase(agent_breaker_transitions=0.5)),
        quiet=lambda d: record_run(d, fault=phase(agent_breaker_transitions=0.1)),
    ),
    "fallback-not-taking-effect": Case(
        fires=lambda d: record_run(d, fault=phase(load_error=0.3)),
        quiet=lambda d: record_run(d, fault=phase(load_error=0.3, load_fallback=0.9)),
    ),
    "tool-saturation": Case(
        fires=lambda d: record_run(
            d, fault=phase(agent_tool_queue=12.0, agent_admission_rejected=2.0)
        ),
        quiet=lambda d: record_run(d, fault=phase(agent_tool_queue=1.0)),
    ),
    "silent-recall-loss": Case(
        fires=lambda d: record_run(d, checks=[check("recall", Verdict.FAILED)]),
        # Recall fell but requests failed loudly too: not silent.
        quiet=lambda d: record_run(
            d, fault=phase(load_error=0.3), checks=[check("recall", Verdict.FAILED)]
        ),
    ),
    "canary-regression": Case(
        fires=lambda d: record_run(d, checks=[check("latency_ratio", Verdict.FAILED)]),
        quiet=lambda d: record_run(d, checks=[check("latency_ratio", Verdict.PASSED)]),
    ),
    # From the run's traces: each fires on its evidence, stays quiet on a near miss and
    # (test_trace_rules_never_fire_without_traces) on a run without traces.json.
    "trace-mover": Case(
        fires=lambda d: _traced(d, traced.Shape()),
        # A hop whose share grew a little (8 % → 25 %) is no mover worth a diagnosis.
        quiet=lambda d: _traced(d, traced.Shape(search_share=0.25)),
    ),
    "trace-retries": Case(
        fires=lambda d: _traced(d, traced.Shape(chat_calls=3.0)),
        # Two model calls per request, in the baseline as in the fault: the agent's design.
        quiet=lambda d: _traced(d, traced.Shape(chat_calls=2.0, base_chat_calls=2.0)),
    ),
    "trace-failing-hop": Case(
        fires=lambda d: _traced(d, traced.Shape()),
        quiet=lambda d: _traced(d, traced.Shape(failed=False)),
    ),
}


def _traced(run_dir: Path, shape: traced.Shape) -> Journal:
    journal = record_run(run_dir)
    traced.write(run_dir, shape)
    return journal


def _fired(run_dir: Path, journal: Journal) -> list[Diagnosis]:
    return diagnose(journal, read_series(run_dir), run_dir)


def test_every_rule_has_a_case() -> None:
    assert {r.id for r in default_rules().rules} == set(CASES)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_the_rule_fires_on_its_evidence(rule: str, tmp_path: Path) -> None:
    journal = CASES[rule].fires(tmp_path)
    hits = [d for d in _fired(tmp_path, journal) if d.rule == rule]
    assert hits, f"{rule} did not fire; fired: {[d.rule for d in _fired(tmp_path, journal)]}"
    assert hits[0].evidence and hits[0].checks
    assert all(cmd for _, cmd in hits[0].checks)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_the_rule_stays_quiet_on_a_near_miss(rule: str, tmp_path: Path) -> None:
    journal = CASES[rule].quiet(tmp_path)
    assert rule not in {d.rule for d in _fired(tmp_path, journal)}


def test_a_healthy_run_fires_nothing_and_the_report_says_so(tmp_path: Path) -> None:
    journal = record_run(tmp_path)
    assert _fired(tmp_path, journal) == []
    assert render_all(journal, tmp_path) == []
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "No diagnosis rule fired on this run's evidence." in md
    assert "No diagnosis rule fired" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_throttling_cites_clock_power_and_violations_in_the_report(tmp_path: Path) -> None:
    journal = record_run(tmp_path, fault=THROTTLED)
    (d,) = [d for d in _fired(tmp_path, journal) if d.rule == "throughput-drop-throttling"]
    text = "\n".join(d.evidence)
    assert d.component == "llm-primary"
    assert d.window == "during xid79"
    assert "SM clock 1980 → 660 MHz" in text
    assert "DCGM_FI_DEV_THERMAL_VIOLATION +20s" in text
    assert "power 400 → 250 W" in text
    assert render_all(journal, tmp_path) == []
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Thermal or power throttling" in html
    assert "SM clock 1980 → 660 MHz" in html
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    # This run's own runbook (gpu-loss) is excerpted below; llm-latency is the template.
    assert "runbook [llm-latency](" in md
    assert "llm-latency.md.j2)" in md


def test_the_xid_is_quoted_with_its_value(tmp_path: Path) -> None:
    journal = record_run(tmp_path, fault=phase(gpu_xid=79, load_error=0.3))
    (d,) = [d for d in _fired(tmp_path, journal) if d.rule == "gpu-lost-xid"]
    assert any("DCGM_FI_DEV_XID_ERRORS = 79" in e for e in d.evidence)
    assert d.runbook == journal.runbook  # its own runbook: linked to the excerpt
    assert render_all(journal, tmp_path) == []
    assert 'href="#runbook"' in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_commands_follow_the_run_stack(tmp_path: Path) -> None:
    journal = record_run(tmp_path, fault=THROTTLED)
    journal.stack["driver"] = "kubernetes"
    (d,) = [d for d in _fired(tmp_path, journal) if d.rule == "throughput-drop-throttling"]
    assert all(cmd.startswith("kubectl") for _, cmd in d.checks)
    assert "deploy/llm-primary" in d.checks[0][1]


BAD_RULES = """\
version: 1
rules:
  - id: one
    symptom: s
    cause: c
    runbook: gpu-loss
    all:
      - {signal: sm_clock_ratio, lt: 0.8}
    checks:
      - {what: w, local: a, docker: b, k8s: c}
  - id: two
    symptom: s
    cause: c
    runbook: gpu-loss
    all:
      - {signal: no_such_signal, gt: 1}
    checks: []
"""


def test_a_bad_rule_file_names_file_line_and_every_problem() -> None:
    with pytest.raises(ScenarioError) as err:
        parse_rules(BAD_RULES, file="rules.yaml")
    text = str(err.value)
    assert "rules.yaml:3" in text  # rule one: replica signal without scope: replica
    assert "scope: replica" in text
    assert "rules.yaml:16" in text  # the unknown signal, on its own line
    assert "no_such_signal" in text or "sm_clock_ratio" in text


KERNEL_XID = (
    "ERROR 2026-12-02 00:45:15,082 [faultday.llmsim.gpu] [ 1013.183467] NVRM: Xid "
    "(PCI:0000:01:00): 79, pid=6812, name=VLLM::EngineCore, GPU has fallen off the bus.\n"
)


def test_an_xid_the_scrape_missed_is_read_from_the_replica_kernel_line(tmp_path: Path) -> None:
    # The replica died before a scrape saw DCGM_FI_DEV_XID_ERRORS = 79; its log has the line.
    journal = record_run(
        tmp_path, fault=phase(gpu_up=False, load_error=0.3), logs={"llm-primary": KERNEL_XID}
    )
    (d,) = [d for d in _fired(tmp_path, journal) if d.rule == "gpu-lost-xid"]
    assert d.evidence[0].startswith("xid = 79 (> 0): kernel log: NVRM: Xid (PCI:0000:01:00): 79")
    assert "DCGM_FI_DEV_XID_ERRORS was not scraped" in d.evidence[0]


def test_a_kernel_line_counts_only_for_the_replica_the_fault_hit(tmp_path: Path) -> None:
    journal = record_run(
        tmp_path, fault=phase(gpu_up=False, load_error=0.3), logs={"llm-primary": KERNEL_XID}
    )
    journal.faults[0].target = "llm-backup"
    assert "gpu-lost-xid" not in {d.rule for d in _fired(tmp_path, journal)}


TRACE_RULES = ("trace-mover", "trace-retries", "trace-failing-hop")


def test_trace_rules_never_fire_without_traces(tmp_path: Path) -> None:
    # The same run as the cases above, failing and slow, but no trace collector ran.
    journal = record_run(tmp_path, fault=phase(**SLOW, load_error=0.3))
    assert not {d.rule for d in _fired(tmp_path, journal)} & set(TRACE_RULES)


def test_trace_rules_quote_their_evidence_in_the_report(tmp_path: Path) -> None:
    journal = _traced(tmp_path, traced.Shape(chat_calls=3.0))
    fired = {d.rule: d for d in _fired(tmp_path, journal)}
    assert set(TRACE_RULES) <= set(fired)
    mover = fired["trace-mover"].evidence[0]
    assert mover.startswith("hop_share_rise = 0.63 (≥ 0.2): agent/qdrant.search took 71 %")
    assert "p99 2.3 s (baseline 12 ms)" in mover
    retries = "\n".join(fired["trace-retries"].evidence)
    assert "agent/llm.chat called 3 times per traced request (baseline 1)" in retries
    assert re.search(r"hop_retries = 2\b.*agent/llm\.chat: \d+ retries over \d+ traced", retries)
    # The failed exemplar calls llm.chat twice under one parent: the retry, seen in a trace.
    assert f"agent/llm.chat 2 times under one parent in trace {traced.TRACE_FAILED}" in retries
    failing = fired["trace-failing-hop"].evidence[0]
    # The root span (the agent) failed too, and first by start time; the hop that failed
    # first is the one whose error ended first.
    assert "the first error was in llm-primary/llm_request" in failing
    assert "GPU has fallen off the bus" in failing and traced.TRACE_FAILED in failing
    assert f"{tmp_path}/traces.json" in fired["trace-mover"].checks[0][1]
    assert render_all(journal, tmp_path) == []
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    for rule in TRACE_RULES:
        assert f"Rule `{rule}`" in md and f"rule <code>{rule}</code>" in html
    assert "the first error was in llm-primary/llm_request" in md

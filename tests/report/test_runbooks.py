"""Runbooks: one per failure mode; local and k8s differ in commands and agree in structure."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.conftest import ROOT, faultday

from faultday.gameday import facts_from_profile
from faultday.report import runbooks as rb

FAILURE_MODES = [
    "agent-crash",
    "gpu-hang",
    "gpu-loss",
    "kv-pressure",
    "llm-latency",
    "model-rollout",
    "redis-outage",
    "retrieval-degraded",
    "retry-storm",
    "tool-overload",
    "vector-store-outage",
]
STRUCTURE = [
    "What counts as an incident",
    "Detection signals",
    "First checks",
    "Switching traffic",
    "Actions",
    "Notify",
    "Verify recovery",
    "Collect for the postmortem",
    "Last game day",
]
RUNBOOKS = ROOT / "runbooks"


def _blocks(md: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", md, re.S)


def test_every_failure_mode_has_a_runbook() -> None:
    assert rb.runbook_names(RUNBOOKS) == FAILURE_MODES


@pytest.mark.parametrize("name", FAILURE_MODES)
def test_local_and_k8s_agree_in_structure_and_differ_in_commands(name: str) -> None:
    local = rb.render_runbook(
        name, facts=facts_from_profile("local", base_dir=ROOT), runbook_dir=RUNBOOKS
    )
    k8s = rb.render_runbook(
        name, facts=facts_from_profile("k8s", base_dir=ROOT), runbook_dir=RUNBOOKS
    )
    assert rb.headings(local) == rb.headings(k8s)
    assert [h[3:] for h in rb.headings(local) if h.startswith("## ")] == STRUCTURE
    lb, kb = _blocks(local), _blocks(k8s)
    assert len(lb) == len(kb) and lb
    assert any("kubectl" in b for b in kb)
    assert not any("kubectl" in b for b in lb)
    assert sum(a != b for a, b in zip(lb, kb, strict=True)) >= len(lb) // 2
    # The stack's facts, not placeholders: the agent policy's numbers where a runbook quotes them.
    assert "n/a" not in local
    for section, body in rb.sections(local).items():
        assert body.strip(), f"{name}: empty section {section}"


def test_game_day_numbers_are_quoted_where_the_runbook_applies() -> None:
    facts = facts_from_profile("local", base_dir=ROOT)
    numbers = [
        rb.Measured(
            scenario="gpu-loss-primary",
            runbook="gpu-loss",
            check="recovery_time",
            label="after xid79: recovery_time",
            window="after xid79",
            expected="≤ 20s",
            observed="4.2s",
            verdict="passed",
            date="2026-03-31",
        )
    ]
    text = rb.render_runbook("gpu-loss", facts=facts, runbook_dir=RUNBOOKS, results=numbers)
    assert (
        "At the last game day (2026-03-31), `gpu-loss-primary` — after xid79: recovery_time: "
        "observed 4.2s; budget ≤ 20s (**passed**)."
    ) in text
    other = rb.render_runbook("redis-outage", facts=facts, runbook_dir=RUNBOOKS, results=numbers)
    assert "No game-day results were given" in other


def test_an_undefined_name_in_a_template_is_an_error_not_a_blank(tmp_path: Path) -> None:
    for f in RUNBOOKS.glob("_*.md.j2"):
        (tmp_path / f.name).write_text(f.read_text())
    (tmp_path / "typo.md.j2").write_text(
        '{% extends "_runbook.md.j2" %}{% block title %}{{ stack.llm_primray }}{% endblock %}'
    )
    with pytest.raises(rb.RunbookError, match="llm_primray"):
        rb.render_runbook(
            "typo", facts=facts_from_profile("local", base_dir=ROOT), runbook_dir=tmp_path
        )


def test_markdown_to_html_escapes_raw_html() -> None:
    html = rb.markdown_html("# t\n\n<script>alert(1)</script>\n\n`<b>`")
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_runbook_render_command_writes_markdown_and_html(tmp_path: Path) -> None:
    r = faultday("runbook", "render", "--stack", "k8s", "--out", str(tmp_path / "k8s"))
    assert r.returncode == 0, r.stderr
    for name in FAILURE_MODES:
        md = (tmp_path / "k8s" / f"{name}.md").read_text()
        html = (tmp_path / "k8s" / f"{name}.html").read_text()
        assert "kubectl -n faultday" in md and "<h2>First checks</h2>" in html
    index = (tmp_path / "k8s" / "index.html").read_text()
    assert all(f'href="{n}.html"' in index for n in FAILURE_MODES)
    bad = faultday("runbook", "render", "--stack", "nope", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "no stack profile named 'nope'" in bad.stderr


# The GPU runbooks' detection tables: dcgm-exporter's field and threshold beside the kernel log.
GPU_SIGNALS = {
    "gpu-loss": ("DCGM_FI_DEV_XID_ERRORS", "79 (fallen off the bus)", "NVRM: Xid"),
    "gpu-hang": ("DCGM_FI_DEV_GPU_UTIL", "≥ 90 % for 30 s", "NVRM: Xid"),
    "llm-latency": ("DCGM_FI_DEV_SM_CLOCK", "< 80 % of its clock", "HW Slowdown"),
}
WHERE = {
    "local": ("/metrics of llm-primary", "dmesg -T"),
    "docker": ("/metrics of the llm-primary container", "the host's kernel log"),
    "k8s": ("dcgm-exporter on the node of llm-primary", "kubectl debug node/"),
}


@pytest.mark.parametrize("driver", sorted(WHERE))
@pytest.mark.parametrize("name", sorted(GPU_SIGNALS))
def test_gpu_runbooks_name_the_dcgm_metric_and_threshold_next_to_the_kernel_log(
    name: str, driver: str
) -> None:
    facts = facts_from_profile(driver, base_dir=ROOT)
    assert facts.driver == driver
    md = rb.render_runbook(name, facts=facts, runbook_dir=RUNBOOKS)
    secs = rb.sections(md)
    metric, threshold, kernel = GPU_SIGNALS[name]
    where, kernel_cmd = WHERE[driver]
    rows = [ln for ln in secs["Detection signals"].splitlines() if metric in ln]
    assert rows and threshold in rows[0] and where in rows[0], rows
    assert kernel in secs["Detection signals"]
    dcgm_cmds = [b for b in _blocks(secs["First checks"]) if "DCGM_FI_DEV_" in b]
    assert dcgm_cmds, secs["First checks"]
    assert any(kernel_cmd in b for b in _blocks(secs["First checks"]))
    if driver == "k8s":
        assert "nvidia-dcgm-exporter" in dcgm_cmds[0]

"""Quoted text stays text in every output: report.md, runbooks, game days, HTML and JUnit.

A renderer that passes raw HTML through (CommonMark's default, many wikis and code
hosts) must find no live tag, link or image in a Markdown report whose journal is
hostile in every string field; the reader still sees each hostile value, as text.
"""

from __future__ import annotations

import dataclasses
import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.conftest import ROOT, faultday
from tests.report.hostile import (
    blocks,
    html_tags,
    inline_text,
    live_markup,
    marker,
    payload,
    poison,
    rendered_markdown_problems,
    visible_text,
)
from tests.report.journals import aborted_journal, failed_journal, write_series
from tests.report.test_reports import SECTIONS
from tests.report.test_runbooks import FAILURE_MODES, STRUCTURE

from faultday.core.journal import Journal
from faultday.gameday import facts_from_profile
from faultday.report import markdown
from faultday.report import runbooks as rb
from faultday.report.gameday import GameDay, render_gameday, summarize
from faultday.report.render import render_all

CHARTS = r"^charts/[a-z]+\.svg$"
# Hostile fault names are long labels: matplotlib says so while laying out the charts.
pytestmark = pytest.mark.filterwarnings("ignore:constrained_layout not applied:UserWarning")
RUNBOOKS = ROOT / "runbooks"
# Journal strings report.md need not show, and why; every other one must be seen, as text.
NOT_QUOTED = {
    r"run_dir$": "the folder the report is written in",
    r"tags\b": "the scenario's tags are in its appendix",
    r"artifacts\b": "report.md is one of them",
    r"windows\b": "the checks quote their window",
    r"checks\[\d+\]\.check$": "a check is shown by its label",
    r"scenario\.": "quoted whole in a YAML fence, where line wrapping may split a value",
    r"stack\.": "the runbook excerpt quotes what it needs",
    r".*\.params\.": "a check quotes its target in action items, the rest is configuration",
    r"events\[\d+\]\.data\.(?!answer$|text$|line$)": "timeline detail, not a quote",
}


def _hostile_run(run_dir: Path, *, aborted: bool, runbook: str | None) -> Journal:
    journal = poison(aborted_journal(run_dir) if aborted else failed_journal(run_dir))
    if runbook is not None:
        journal.runbook = runbook  # a real one: the excerpt is rendered from hostile facts
    if not aborted:
        write_series(run_dir)
    assert render_all(journal, run_dir) == []
    return journal


def _string_paths(journal: Journal) -> list[str]:
    """Every path poison() filled, read back from the journal itself."""
    found = re.findall(r"<script>alert\('([^']*)'\)</script>", journal.model_dump_json())
    return sorted(set(found))


def _quoted(path: str) -> bool:
    return not any(re.match(pattern, path) for pattern in NOT_QUOTED)


def _html_problems(html: str) -> list[str]:
    bad = []
    for tag, attrs in html_tags(html).tags:
        if tag == "script":
            bad.append("<script>")
        for name, value in attrs:
            if name.startswith("on"):
                bad.append(f"<{tag} {name}>")
            if name in ("href", "src") and re.match(r"\s*javascript:", value or "", re.I):
                bad.append(f"<{tag} {name}={value!r}>")
    return bad


@pytest.mark.parametrize(
    ("aborted", "runbook"), [(False, None), (True, "gpu-loss")], ids=["failed", "aborted-runbook"]
)
def test_report_md_has_no_live_markup_and_shows_every_hostile_value(
    tmp_path: Path, aborted: bool, runbook: str | None
) -> None:
    journal = _hostile_run(tmp_path / "run", aborted=aborted, runbook=runbook)
    md = (tmp_path / "run" / "report.md").read_text()
    assert live_markup(md, links=CHARTS) == []
    assert rendered_markdown_problems(md, links=CHARTS) == []
    seen = visible_text(md)
    missing = [p for p in _string_paths(journal) if _quoted(p) and marker(p) not in seen]
    assert missing == []
    # No quoted value made a section of its own.
    heads = [h[3:] for h in rb.headings(md) if h.startswith("## ")]
    assert heads == [*SECTIONS[:-1], "Quoted responses and log lines", SECTIONS[-1]]


def test_report_md_runbook_note_is_text(tmp_path: Path) -> None:
    _hostile_run(tmp_path / "run", aborted=False, runbook=None)
    md = (tmp_path / "run" / "report.md").read_text()
    runbook = md[md.index("## Runbook steps") : md.index("## Action items")]
    assert "### Note" in runbook and "no runbook template" in visible_text(runbook)
    assert marker("runbook") in visible_text(runbook)
    assert live_markup(runbook) == []


def test_report_html_and_junit_quote_the_same_hostile_journal_as_text(tmp_path: Path) -> None:
    _hostile_run(tmp_path / "run", aborted=True, runbook=None)
    html = (tmp_path / "run" / "report.html").read_text()
    assert _html_problems(html) == []
    assert "&lt;script&gt;alert(&#39;title&#39;)&lt;/script&gt;" in html
    suites = ET.parse(tmp_path / "run" / "junit.xml").getroot()  # well-formed
    text = "\n".join(
        [
            *(v for e in suites.iter() for v in e.attrib.values()),
            *(e.text or "" for e in suites.iter()),
        ]
    )
    # A hostile verdict is no verdict junit knows: the check is skipped, quoting its message.
    for path in ("reason", "checks[0].label", "checks[0].message", "scenario.metadata.name"):
        assert marker(path) in text


def _hostile_facts(driver: rb.Driver) -> rb.StackFacts:
    """Facts whose every string is hostile; component types stay real so commands quote names."""
    policy = rb.PolicyFacts(
        **{
            f.name: payload(f"policy.{f.name}")
            for f in dataclasses.fields(rb.PolicyFacts)
            if f.type == "str"
        }
    )
    types = ["llmsim", "llmsim", "agent", "qdrant", "triton", "redis", "tools"]
    comps = tuple(rb.ComponentFact(payload(f"component{i}"), t) for i, t in enumerate(types))
    return rb.StackFacts(
        profile=payload("profile"),
        driver=driver,
        components=comps,
        edges=(f"{comps[2].name}->{comps[0].name}",),
        policy=policy,
    )


def _hostile_results(name: str) -> list[rb.Measured]:
    fields = [f.name for f in dataclasses.fields(rb.Measured) if f.name != "runbook"]
    check = rb.Measured(runbook=name, **{f: payload(f"measured.{f}") for f in fields})
    return [check]


@pytest.mark.parametrize("driver", list(rb.Driver))
def test_runbooks_quote_hostile_facts_and_results_as_text(driver: rb.Driver) -> None:
    facts = _hostile_facts(driver)
    seen = ""
    for name in FAILURE_MODES:
        results = _hostile_results(name)
        text = rb.render_runbook(name, facts=facts, runbook_dir=RUNBOOKS, results=results)
        assert live_markup(text) == [], name
        assert rendered_markdown_problems(text) == [], name
        # The structure is the template's: no quoted value opened a section or a fence.
        assert [h[3:] for h in rb.headings(text) if h.startswith("## ")] == STRUCTURE, name
        assert list(rb.sections(text)) == STRUCTURE, name
        shown = visible_text(text)
        fields = ("scenario", "label", "observed", "expected", "verdict")
        assert [f for f in fields if marker(f"measured.{f}") not in shown] == [], name
        seen += shown
    assert [i for i in range(len(facts.components)) if marker(f"component{i}") not in seen] == []
    quoted = [
        f.name for f in dataclasses.fields(rb.PolicyFacts) if marker(f"policy.{f.name}") in seen
    ]
    assert "request_timeout" in quoted and "max_in_flight" in quoted
    assert marker("profile") in seen


def test_rendered_runbook_files_and_index_quote_hostile_facts_as_text(tmp_path: Path) -> None:
    facts = _hostile_facts(rb.Driver.K8S)
    done = rb.render_runbooks(
        facts=facts, runbook_dir=RUNBOOKS, out_dir=tmp_path, results=_hostile_results("gpu-loss")
    )
    assert [r.name for r in done] == FAILURE_MODES
    index = (tmp_path / "index.md").read_text()
    assert live_markup(index, links=r"^[a-z-]+\.md$") == []
    assert marker("profile") in visible_text(index)
    titles = {}
    for r in done:
        page = r.html.read_text()
        assert _html_problems(page) == [], r.name
        title = re.search(r"<title>(.*?)</title>", page, re.S)
        titles[r.name] = html.unescape(title.group(1)) if title else ""
    # A heading that quotes a name shows it as its reader sees it: no Markdown escapes left.
    assert marker("component0") in titles["gpu-loss"]
    assert marker("component2") in titles["agent-crash"]


def _hostile_gameday(tmp_path: Path) -> tuple[GameDay, GameDay, list[Journal]]:
    folder = tmp_path / "gameday"
    journals = [
        _hostile_run(folder / "a", aborted=False, runbook=None),
        _hostile_run(folder / "b", aborted=True, runbook="gpu-loss"),
    ]
    gd = GameDay(id="gameday-x", started=1767225600.0, ended=1767225700.0)
    gd.scenarios = [summarize(j, folder) for j in journals]
    gd = poison(gd)
    gd.scenarios[1].runbook = "gpu-loss"  # its numbers are quoted in that runbook
    previous = poison(gd.model_copy(update={"started": gd.started - 86400}), "previous")
    return gd, previous, journals


def test_game_day_outputs_quote_hostile_scorecards_as_text(tmp_path: Path) -> None:
    gd, previous, journals = _hostile_gameday(tmp_path)
    folder = tmp_path / "gameday"
    render_gameday(
        gd,
        folder,
        journals=journals,
        previous=previous,
        base_dir=ROOT,
        runbook_facts=lambda: facts_from_profile("local", base_dir=ROOT),
    )
    gpu = (folder / "runbooks" / "gpu-loss.md").read_text()
    assert live_markup(gpu) == [] and rendered_markdown_problems(gpu) == []
    last = visible_text(gpu[gpu.index("## Last game day") :])
    for path in ("scenarios[1].name", "scenarios[1].checks[0].label"):
        assert marker(path) in last
    assert marker("scenarios[1].checks[0].observed") in last
    index = (folder / "index.html").read_text()
    assert _html_problems(index) == []
    assert "&lt;script&gt;alert(&#39;scenarios[0].title&#39;)" in index
    ET.parse(folder / "junit.xml")  # well-formed despite the quotes


def test_runbook_render_command_quotes_a_hostile_game_day(tmp_path: Path) -> None:
    gd, _, _ = _hostile_gameday(tmp_path)
    gd.write(tmp_path / "gameday")
    out = tmp_path / "out"
    r = faultday(
        "runbook", "render", "--stack", "local", "--results", str(tmp_path / "gameday"),
        "--out", str(out), "--name", "gpu-loss",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    md = (out / "gpu-loss.md").read_text()
    assert live_markup(md) == [] and marker("scenarios[1].checks[0].window") in visible_text(md)


ORDINARY = [
    "error_rate",
    "during xid79: fallback_rate",
    "agent->tools",
    "≤ 1.0%",
    "7.3×",
    "-2.00",
    "abort condition tripped: error_rate 62.0% > 50.0%",
    "gpu_loss on llm-primary",
    "R&D: 3 < 4",
]


@pytest.mark.parametrize("value", ORDINARY)
def test_ordinary_values_read_as_written(value: str) -> None:
    # Escaping costs nothing where nothing needs it (only "<" changes, to an entity).
    assert markdown.inline(value) == value.replace("<", "&lt;")
    assert inline_text(f"x {markdown.inline(value)}") == f"x {value}"


@pytest.mark.parametrize(
    "value",
    [
        "# heading",
        "> quote",
        "- item",
        "+ item",
        "1. item",
        "2) item",
        "---",
        "===",
        "<b>x</b>",
        "&amp; &#60; &lt;",
        "`code` ``more``",
        "**strong** *em* _em_ __strong__ ~~gone~~",
        "[link](http://x) ![img](x) <http://x> [ref]: /x",
        "a | b | c",
        "back\\slash\\",
        "line\nbreak\r\nand\u2028more",
        "   indented",
    ],
)
def test_inline_shows_markdown_syntax_as_text_on_its_own_line(value: str) -> None:
    doc = markdown.inline(value)
    expected = markdown.one_line(value)
    as_paragraph = [t.type for t in blocks(doc)]
    assert as_paragraph == ["paragraph_open", "inline", "paragraph_close"], doc
    assert inline_text(doc) == expected
    cell = f"| h |\n|---|\n| {doc} |\n"
    assert inline_text(cell) == f"h{expected}"


@pytest.mark.parametrize(
    "value", ["a", "x`y", "`lead", "trail`", "``", "a|b", "<b>", "a\nb", " s "]
)
def test_code_span_holds_any_text(value: str) -> None:
    span = markdown.code(value)
    expected = markdown.one_line(value)
    assert inline_text(span) == expected
    cell = f"| h |\n|---|\n| {span} |\n"
    assert inline_text(cell) == f"h{expected}"


@pytest.mark.parametrize("value", ["plain", "```\n<script>x</script>\n```", "````\n## h", "a\rb"])
def test_fence_cannot_be_closed_by_its_text(value: str) -> None:
    block = markdown.fence(value, "text") + "\n\n<b>after</b>\n"
    fences = [t for t in blocks(block) if t.type == "fence"]
    assert len(fences) == 1 and fences[0].content == re.sub("\r\n?", "\n", value) + "\n"
    # What follows the fence is outside it (raw HTML there is the test's, not the value's).
    after = ["paragraph_open", "inline", "paragraph_close"]
    assert [t.type for t in blocks(block)] == ["fence", *after]

"""The report's "Where the time went" from a run folder's traces.json, in report.md and HTML."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest
from tests.report import traced
from tests.report.hostile import (
    html_tags,
    live_markup,
    marker,
    payload,
    rendered_markdown_problems,
    visible_text,
)
from tests.report.journals import failed_journal, write_series
from tests.report.test_reports import SECTIONS

from faultday.core.traces import TRACES_NAME, write_traces
from faultday.report.render import render_all
from faultday.report.tracing import NO_TRACES

pytestmark = pytest.mark.timeout(120)
SECTION = "Where the time went"
CHART = "charts/hops.svg"


def _run(run_dir: Path, shape: traced.Shape | None = None, *, traces: bool = True) -> Path:
    journal = failed_journal(run_dir)
    write_series(run_dir)
    if traces:
        traced.write(run_dir, shape)
    assert render_all(journal, run_dir) == []
    return run_dir


def _md_section(run_dir: Path) -> str:
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    return md[md.index(f"## {SECTION}") : md.index("## Timeline")]


def _html_section(run_dir: Path) -> str:
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    return html[html.index('<h2 id="time">') : html.index('<h2 id="timeline">')]


def test_the_section_names_the_mover_with_its_chart_tables_and_waterfalls(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "run")
    md, html = _md_section(run_dir), _html_section(run_dir)
    mover = (
        "During xid79, 71 % of request time was in agent/qdrant.search, p99 2.3 s "
        "(baseline 12 ms; 8 % of request time then). Faults seen on this hop: latency."
    )
    top = "In the baseline, the top hop was llm-primary/llm_request/decode with 34 %"
    assert mover in visible_text(md) and top in visible_text(md)
    assert mover in html and top in html
    # The chart is a file beside report.md, linked from the section, and inline in the HTML.
    assert (run_dir / CHART).is_file()
    assert f"![Share of request time per hop]({CHART})" in md
    svg = (run_dir / CHART).read_text(encoding="utf-8")
    assert "agent/qdrant.search" in svg and ">other<" in svg
    assert 'id="chart-hops"' in html
    # One table per window, largest share first; nine hops: eight named and one "other".
    assert "| `agent/qdrant.search` (faults: latency) | 71 % | 1.1 s | 2.3 s | 190 | 3 |" in md
    assert [h for h in re.findall(r"(?m)^### (.+)$", md)] == [
        "baseline",
        "during xid79",
        "after recovery",
        "Exemplar requests",
    ]
    assert md.count("| `other (1 hop)` |") == 3
    # Waterfalls: an SVG per exemplar with its trace id; failed spans marked.
    for trace in (traced.TRACE_SLOW, traced.TRACE_FAILED):
        assert f'aria-label="waterfall of trace {trace}"' in html
        assert f"trace `{trace}`" in md
    assert html.count('<g class="span span-error">') == 4
    assert "2 further spans not shown" in md and "2 further spans not shown" in html
    # The Markdown tree: name  service  start+dur  note, indented by depth, in a fence.
    tree = visible_text(md)
    assert "  qdrant.search  agent  10 ms+2.3 s  toxic latency 2000 ms" in tree
    assert "    llm_request  llm-primary  230 ms+300 ms  ERROR GPU has fallen off the bus" in tree
    assert "Spans are missing" not in md


def test_the_section_sits_after_the_charts_in_both_outputs(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "run")
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert [h for h in re.findall(r"(?m)^## (.+)$", md) if h in SECTIONS] == SECTIONS
    heads = re.findall(r"<h2[^>]*>(.*?)</h2>", html)
    assert heads.index(SECTION) == heads.index("Charts") + 1


def test_dropped_and_rejected_spans_are_explained(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "run", traced.Shape(dropped=1200, rejected=3))
    for text in (_md_section(run_dir), _html_section(run_dir)):
        assert "Spans are missing" in text
        assert "dropped 1,200 spans past its cap" in text
        assert "refused 3 export bodies" in text


def test_a_run_without_traces_says_how_to_trace_and_draws_no_chart(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "run", traces=False)
    md, html = _md_section(run_dir), _html_section(run_dir)
    assert NO_TRACES in visible_text(md) and "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in NO_TRACES
    assert NO_TRACES in unescape(html)
    assert not (run_dir / CHART).exists()
    assert "<svg" not in html and "![" not in md


def test_a_summary_without_spans_shows_its_own_note(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    journal = failed_journal(run_dir)
    empty = traced.summary().model_copy(
        update={"spans": 0, "traces": 0, "requests_traced": 0, "exemplars": []}
    )
    note = "no collector ran: start the stack with tracing on (see docs/traces.md)"
    # Every export body was refused: that is why there are no spans, and the report says so.
    empty = empty.model_copy(update={"note": note, "rejected": 5})
    write_traces(run_dir, empty)
    assert render_all(journal, run_dir) == []
    html, md = unescape(_html_section(run_dir)), visible_text(_md_section(run_dir))
    for text in (html, md):
        assert note in text and "refused 5 export bodies" in text
    assert not (run_dir / CHART).exists() and "<svg" not in html


def test_an_unreadable_traces_json_is_named_and_the_report_still_renders(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    journal = failed_journal(run_dir)
    (run_dir / TRACES_NAME).write_text('{"spans": "many"}', encoding="utf-8")
    assert render_all(journal, run_dir) == []
    html = _html_section(run_dir)
    assert f"{TRACES_NAME} could not be read" in html and "field " in html
    assert "<svg" not in html


# "$…$" first: the chart shows a name's first 40 characters, and this must stay text there.
HOSTILE = "$x^2$ " + payload("span")


def test_hostile_span_names_stay_text(tmp_path: Path) -> None:
    run_dir = _run(tmp_path / "run", traced.Shape(name=HOSTILE))
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    # Markdown: no tag, link or image came from the name; no section either; still readable.
    # The links the report makes itself: charts, and the diagnoses' runbooks.
    links = r"^(charts/[a-z-]+\.svg|#runbook|(\.\./)*[\w/.-]*runbooks/[a-z-]+\.md\.j2)$"
    assert live_markup(md, links=links) == []
    assert rendered_markdown_problems(md, links=links) == []
    assert [h for h in re.findall(r"(?m)^## (.+)$", md)] == [
        *SECTIONS[:-1],
        "Quoted responses and log lines",  # the journal quotes a model answer
        SECTIONS[-1],
    ]
    assert marker("span") in visible_text(md[md.index(f"## {SECTION}") : md.index("## Timeline")])
    # HTML: no script, no handler, no javascript: URL; the name shown escaped in the SVGs.
    for tag, attrs in html_tags(html).tags:
        assert tag != "script"
        assert not [n for n, _ in attrs if n.startswith("on")], tag
        assert not [v for n, v in attrs if n == "href" and "javascript:" in (v or "")], tag
    assert html.count("&lt;script&gt;alert(&#39;span&#39;)&lt;/script&gt;") >= 4
    # The chart's legend quotes the name as text, "$" and all, not as mathematics.
    svg = (run_dir / CHART).read_text(encoding="utf-8")
    assert "agent/$x^2$ javascript:alert('span')//&lt;…" in svg and "<script" not in svg

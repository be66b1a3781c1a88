"""The sampled-answers table: at most N rows per window, hostile answer text shown as text."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.report.hostile import (
    html_tags,
    live_markup,
    marker,
    payload,
    rendered_markdown_problems,
)
from tests.report.journals import failed_journal

from faultday.core.records import ANSWERS_NAME, AnswerLabel, AnswerSample
from faultday.report.reporters import html, markdown
from faultday.report.view import build_view

CHARTS = r"^charts/[a-z_-]+\.svg$"


def write_answers(run_dir: Path, samples: list[AnswerSample], *, junk: int = 0) -> None:
    lines = [json.dumps(s.to_json()) for s in samples] + ["{not json"] * junk
    (run_dir / ANSWERS_NAME).write_text("\n".join(lines) + "\n", encoding="utf-8")


def hostile(t: float, k: int, label: AnswerLabel) -> AnswerSample:
    return AnswerSample(
        t=t,
        name=payload(f"name{k}")[:60],
        label=label,
        status=200,
        text=payload(f"answer{k}"),
        key=(0, 1, k),
        sources=(payload(f"src{k}")[:64],),
        cited=("a|b", "`x`"),
    )


def test_hostile_answers_are_text_in_markdown_and_html(tmp_path: Path) -> None:
    journal = failed_journal(tmp_path)
    # 12 answers in the fault window (20-40 s), 3 in the baseline.
    samples = [hostile(21.0 + k, k, AnswerLabel.OFF_TOPIC) for k in range(12)]
    samples += [hostile(1.0 + k, 100 + k, AnswerLabel.OK) for k in range(3)]
    write_answers(tmp_path, samples)
    markdown(journal, tmp_path)
    html(journal, tmp_path)
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert "## Sampled answers" in md and 'id="answers"' in page
    assert live_markup(md, links=CHARTS) == []
    assert rendered_markdown_problems(md, links=CHARTS) == []
    for tag, attrs in html_tags(page).tags:
        assert tag not in {"script", "img"}, (tag, attrs)
        assert not any(name.startswith("on") for name, _ in attrs), (tag, attrs)
    assert "<script>alert(" not in page and "<img src=x" not in page
    # The reader still sees what was received, escaped.
    shown = marker("answer0").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;")
    assert shown in page
    # A table row per quoted answer stays one row: pipes and line breaks in the text are escaped.
    section = md[md.index("## Sampled answers") : md.index("## Runbook")]
    rows = [line for line in section.splitlines() if "alert" in line]
    assert len(rows) == 5 + 3, rows  # 5 of 12 in the fault window (the default), 3 of 3
    # Seven cells each: the escaped pipes (\\|) in the text do not split a cell.
    assert all(len(re.findall(r"(?<!\\)\|", r)) == 8 for r in rows), rows


def test_rows_per_window_follow_the_scenario_and_worst_labels_show_first(tmp_path: Path) -> None:
    journal = failed_journal(tmp_path)
    spec = journal.scenario["spec"]
    assert isinstance(spec, dict)
    spec["load"] = {"workload": "rag", "answers": {"rows": 3}}
    labels = [AnswerLabel.OK] * 8 + [AnswerLabel.CANNED, AnswerLabel.TIMEOUT]
    samples = [
        AnswerSample(t=21.0 + k, name="rag", label=lab, status=200, text=f"a{k}", key=(0, 1, k))
        for k, lab in enumerate(labels)
    ]
    write_answers(tmp_path, samples, junk=2)
    view = build_view(journal, tmp_path, charts=False)
    (table,) = view.sampled_answers
    assert table.window == "during xid79" and table.kept == 10
    assert sorted(r.label for r in table.rows) == ["canned", "ok", "timeout"]
    assert "2 unreadable lines" in view.answers_note


def test_no_answers_file_no_section(tmp_path: Path) -> None:
    journal = failed_journal(tmp_path)
    markdown(journal, tmp_path)
    assert "Sampled answers" not in (tmp_path / "report.md").read_text()

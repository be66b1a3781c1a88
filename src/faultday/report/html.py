"""jinja2 environments and page renderers: StrictUndefined always, autoescape for HTML."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup

if TYPE_CHECKING:
    from faultday.report.runbooks import RenderedRunbook, StackFacts
    from faultday.report.view import ReportView

TEMPLATES = Path(__file__).parent / "templates"


def num(value: float | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def md_inline(value: object) -> str:
    """Text for one Markdown table cell or line: no raw HTML, no table breaks, one line."""
    text = str(value)
    # "<" is all it takes to open a tag in renderers that pass HTML through; "->" stays readable.
    text = text.replace("<", "&lt;")
    return re.sub(r"\s*\n\s*", " ", text).replace("|", "\\|")


def fence(value: object, lang: str = "") -> str:
    """A fenced code block that the text cannot close early."""
    text = str(value).rstrip("\n")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _markdown(value: str) -> Markup:
    from faultday.report.runbooks import markdown_html

    return Markup(markdown_html(value))  # noqa: S704 - markdown_html escapes raw HTML


@cache
def _css() -> str:
    return (TEMPLATES / "_style.css").read_text(encoding="utf-8")


def environment(*, html: bool) -> jinja2.Environment:
    """A fresh environment (no module-global state): HTML ones autoescape everything."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        autoescape=html,  # noqa: S701 - Markdown output is text; every HTML page escapes
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(num=num, pct=pct, md=md_inline, fence=fence, markdown=_markdown)
    # Our own stylesheet, not data: escaping it would break quoted font names inside <style>.
    env.globals["css"] = Markup(_css()) if html else _css()  # noqa: S704
    return env


def report_html(view: ReportView) -> str:
    return environment(html=True).get_template("report.html.j2").render(v=view, j=view.journal)


def report_markdown(view: ReportView, chart_files: Sequence[tuple[str, str]]) -> str:
    return (
        environment(html=False)
        .get_template("report.md.j2")
        .render(v=view, j=view.journal, chart_files=list(chart_files))
    )


def runbook_page(*, title: str, body: str, facts: StackFacts) -> str:
    return (
        environment(html=True)
        .get_template("runbook.html.j2")
        .render(
            title=title,
            body=Markup(body),  # noqa: S704 - body comes from markdown_html, which escapes
            facts=facts,
        )
    )


def runbook_index_page(*, facts: StackFacts, runbooks: Sequence[RenderedRunbook]) -> str:
    return (
        environment(html=True)
        .get_template("runbooks.html.j2")
        .render(facts=facts, runbooks=list(runbooks))
    )


def gameday_page(**context: object) -> str:
    """The game day's ``index.html``: scorecard, resilience score, trend, links."""
    from datetime import UTC, datetime

    env = environment(html=True)
    env.filters["when"] = lambda ts: (
        "—" if not ts else datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M UTC")
    )
    return env.get_template("gameday.html.j2").render(**context)

"""jinja2 environments and page renderers: StrictUndefined always; HTML or Markdown escaping."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup

from faultday.report import markdown, tracing
from faultday.report.markdown import markdown_html

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


def num3(value: float | None) -> str:
    """A small ratio such as tokens per joule: three significant digits."""
    return "—" if value is None else f"{value:.3g}"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


# What makes a browser read an href as another scheme or host; it drops tabs and line
# breaks anywhere in a URL and leading controls and spaces first (WHATWG URL).
_NOT_RELATIVE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:|[/\\]{2})")
_URL_DROPPED = re.compile(r"[\t\n\r]")


def relative_url(value: object) -> str:
    """A link into the report's folder: quoted text cannot make it ``javascript:`` or a host."""
    text = str(value)
    probe = _URL_DROPPED.sub("", text).lstrip("".join(map(chr, range(0x21))))
    return "./" + text if _NOT_RELATIVE.match(probe) else text


def _markdown(value: str) -> Markup:
    return Markup(markdown_html(value))  # noqa: S704 - markdown_html escapes raw HTML


@cache
def _css() -> str:
    return (TEMPLATES / "_style.css").read_text(encoding="utf-8")


def environment() -> jinja2.Environment:
    """A fresh HTML environment (no module-global state) that autoescapes everything."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(num=num, num3=num3, pct=pct, markdown=_markdown, relurl=relative_url)
    env.filters.update(dur=tracing.dur, share=tracing.pct)
    # Our own stylesheet, not data: escaping it would break quoted font names inside <style>.
    env.globals["css"] = Markup(_css())  # noqa: S704
    return env


def markdown_environment() -> jinja2.Environment:
    """A fresh Markdown environment: every printed value is Markdown-escaped by default."""
    env = markdown.environment(TEMPLATES)
    env.filters.update(num=num, num3=num3, pct=pct, dur=tracing.dur, share=tracing.pct)
    return env


def report_html(view: ReportView) -> str:
    return environment().get_template("report.html.j2").render(v=view, j=view.journal)


def report_markdown(
    view: ReportView, chart_files: Sequence[tuple[str, str]], *, time_chart: str = ""
) -> str:
    """``report.md``; ``chart_files`` are (title, path) of the charts, ``time_chart`` the
    path of "Where the time went"'s chart ("" when it has none)."""
    return (
        markdown_environment()
        .get_template("report.md.j2")
        .render(v=view, j=view.journal, chart_files=list(chart_files), time_chart=time_chart)
    )


def runbook_page(*, title: str, body: str, facts: StackFacts) -> str:
    return (
        environment()
        .get_template("runbook.html.j2")
        .render(
            title=title,
            body=Markup(body),  # noqa: S704 - body comes from markdown_html, which escapes
            facts=facts,
        )
    )


def runbook_index_page(*, facts: StackFacts, runbooks: Sequence[RenderedRunbook]) -> str:
    return (
        environment().get_template("runbooks.html.j2").render(facts=facts, runbooks=list(runbooks))
    )


def gameday_page(**context: object) -> str:
    """The game day's ``index.html``: scorecard, resilience score, trend, links."""
    env = environment()
    env.filters["when"] = lambda ts: (
        "—" if not ts else datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M UTC")
    )
    return env.get_template("gameday.html.j2").render(**context)

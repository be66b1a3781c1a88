"""A preflight's ``report.md``, ``report.html`` and ``junit.xml``, from its journal alone.

The run report's sections about load, faults and charts mean nothing before a game day;
this page keeps its look (``_style.css``, the same badges and tables) and shows what a
preflight has: a verdict, the problems with where they are, and every check by area.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from faultday.core.journal import Journal, JournalCheck
from faultday.core.vocab import Verdict
from faultday.report.html import environment, markdown_environment
from faultday.report.junit import JUNIT_NAME, write_junit

AREAS = ("config", "interface", "resources", "logs")  # the order the preflight runs them


@dataclass(frozen=True, slots=True)
class Area:
    name: str
    checks: tuple[JournalCheck, ...]

    def count(self, verdict: str) -> int:
        return sum(1 for c in self.checks if c.verdict == verdict)


@dataclass(frozen=True, slots=True)
class PreflightView:
    journal: Journal
    title: str
    started: str
    wall_seconds: float | None
    problems: tuple[JournalCheck, ...]
    areas: tuple[Area, ...]


def preflight_view(journal: Journal) -> PreflightView:
    names = [a for a in AREAS if any(c.window == a for c in journal.checks)]
    names += sorted({c.window for c in journal.checks} - set(names))
    wall = journal.ended - journal.started if journal.ended and journal.started else None
    return PreflightView(
        journal=journal,
        title=journal.title or f"Preflight of stack {journal.stack_profile}",
        started=datetime.fromtimestamp(journal.started or 0, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        wall_seconds=wall,
        problems=tuple(c for c in journal.checks if c.verdict in (Verdict.FAILED, Verdict.ERROR)),
        areas=tuple(Area(n, tuple(c for c in journal.checks if c.window == n)) for n in names),
    )


KIND = "Preflight"  # journal.scenario["kind"] of a preflight's journal


def is_preflight(journal: Journal) -> bool:
    """A preflight's journal (``faultday report`` renders it with this module)."""
    return journal.scenario.get("kind") == KIND


def render_preflight(journal: Journal, folder: Path) -> dict[str, str]:
    """Write the three reports into ``folder``; return them as journal artifacts."""
    view = preflight_view(journal)
    html = environment().get_template("preflight.html.j2").render(v=view, j=journal)
    (folder / "report.html").write_text(html, encoding="utf-8")
    md = markdown_environment().get_template("preflight.md.j2").render(v=view, j=journal)
    (folder / "report.md").write_text(md, encoding="utf-8")
    write_junit([journal], folder / JUNIT_NAME, name=f"faultday {journal.run_id}")
    return {"report.html": "report.html", "report.md": "report.md", "junit.xml": JUNIT_NAME}

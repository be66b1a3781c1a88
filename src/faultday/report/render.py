"""Render every output of a run from its journal, through the ``faultday.reporters`` plugins."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from pathlib import Path

from faultday.core.journal import Journal
from faultday.core.plugins import REPORTERS

log = logging.getLogger(__name__)


def render_all(journal: Journal, run_dir: Path) -> list[str]:
    """Run each reporter; return the errors (a failing reporter never hides the others)."""
    errors: list[str] = []
    for ep in sorted(entry_points(group=REPORTERS), key=lambda e: e.name):
        try:
            reporter = ep.load()
            artifacts = reporter(journal, run_dir)
        except Exception as exc:
            log.exception("reporter %s failed", ep.name)
            errors.append(f"reporter {ep.name}: {type(exc).__name__}: {exc}")
            continue
        journal.artifacts.update(artifacts or {})
    if errors:
        journal.errors.extend(errors)
    journal.write(run_dir)
    return errors

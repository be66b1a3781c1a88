"""``faultday lint``: the command over ``checks.lint``; cli.py registers it (``register``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from faultday.checks.lint import Severity, lint_file
from faultday.core.exits import ExitCode

out = Console(highlight=False, soft_wrap=True)


def lint(
    files: Annotated[list[Path], typer.Argument(help="Agent policy files, e.g. stack/agent.yaml.")],
    strict: Annotated[bool, typer.Option("--strict", help="Warnings fail too.")] = False,
) -> None:
    """Find contradictions in agent resilience policies; each with file:line and a fix."""
    errors = warnings = 0
    for f in files:
        for finding in lint_file(f):
            colour = "red" if finding.severity == Severity.ERROR else "yellow"
            out.print(
                f"{finding.file}:{finding.line}:{finding.col}: [{colour}]{finding.severity}[/]:"
                f" {finding.path}: {finding.message}"
            )
            out.print(f"    fix: {finding.fix}")
            errors += finding.severity == Severity.ERROR
            warnings += finding.severity == Severity.WARNING
    out.print(f"{errors} errors, {warnings} warnings in {len(files)} file(s)")
    if errors or (strict and warnings):
        raise typer.Exit(ExitCode.FAILED)


def register(app: typer.Typer) -> None:
    app.command("lint")(lint)

"""``faultday preflight``: validate a stack before a game day (docs/preflight.md).

Exit codes as ``faultday run``: 0 every check passed, 1 a check failed, 2 a bad
profile, preflight file or option, 3 interrupted, 4 the stack or a check broke.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from faultday.core.exits import VERDICT_EXIT
from faultday.preflight.runner import PreflightOptions, PreflightOutcome, run_preflight
from faultday.session import check_driver

console = Console(stderr=True, highlight=False)
out = Console(highlight=False)


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight)


def preflight(  # noqa: PLR0917 - typer options, never called positionally
    profile: Annotated[
        str, typer.Option("--profile", "-p", help="Profile name (stack/<name>.yaml) or path.")
    ] = "local",
    driver: Annotated[
        str, typer.Option("--driver", help="Stack driver for a fresh stack: process, docker.")
    ] = "process",
    driver_config: Annotated[
        Path | None, typer.Option("--driver-config", help="The driver's settings file.")
    ] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="Agent policy to run.")] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="A preflight file (kind: Preflight) instead of the profile's spec.preflight.",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Check the stack `faultday stack up` runs there "
            "[default: .faultday/stack/<profile> if it runs, else start one].",
        ),
    ] = None,
    report_dir: Annotated[Path, typer.Option("--report-dir", help="Where the folder goes.")] = Path(
        "reports"
    ),
) -> None:
    """Check a stack before a game day: interface, logs, resources, configuration."""
    check_driver(driver)
    with _sigterm_interrupts():
        outcome = run_preflight(
            PreflightOptions(
                profile=profile,
                base_dir=Path.cwd(),
                report_dir=report_dir,
                driver=driver,
                driver_config=driver_config,
                policy=policy,
                config=config,
                state_dir=state_dir,
            )
        )
    summarize(outcome)
    raise typer.Exit(VERDICT_EXIT[outcome.journal.verdict])


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM as Ctrl-C while the preflight runs: the stack it started is stopped, the
    journal written (exit 3), instead of the harness dying with its stack still up."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, old)  # a second one is not caught
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def summarize(outcome: PreflightOutcome) -> None:
    """One line per problem (what, expected, observed, where), then the verdict."""
    j = outcome.journal
    for c in outcome.problems():
        line = f"{c.window}: {c.label}"
        if c.expected:
            line += f" — expected {c.expected}"
        if c.observed:
            line += f", observed {c.observed}"
        if c.message:
            line += f"\n      {c.message}"
        console.print(f"  [red]✗[/] {escape(line)}", soft_wrap=True)
    for err in outcome.report_errors:
        console.print(f"[red]report error[/] {escape(err)}")
    colour = "green" if j.verdict == "passed" else "red"
    console.print(f"[bold {colour}]PREFLIGHT {j.verdict.upper()}[/] — {escape(j.reason)}")
    report = outcome.run_dir / j.artifacts.get("report.html", "journal.json")
    out.print(f"report: {report}")

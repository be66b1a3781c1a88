"""``faultday report``, ``faultday runbook render`` and ``faultday gameday``: the command line
over ``faultday.report`` (rendering) and ``faultday.gameday`` (running a suite)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from faultday.core.exits import VERDICT_EXIT, ExitCode
from faultday.core.journal import JOURNAL_NAME, read_journal
from faultday.errors import UsageError

if TYPE_CHECKING:
    from faultday.core.events import (
        PreflightDone,
        PreflightStarted,
        ScenarioEnded,
        ScenarioStarted,
        Status,
    )

# The modules behind these commands are imported inside them: ``faultday --help``
# and every other command load this module, and the engine and matplotlib are slow.

console = Console(stderr=True, highlight=False)
out = Console(highlight=False)

runbook_app = typer.Typer(help="Runbooks rendered for a stack.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``faultday`` app."""
    app.command("report")(report)
    app.command("gameday")(gameday)
    app.add_typer(runbook_app, name="runbook")


def report(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (holding journal.json).")],
) -> None:
    """Render a run's reports again from its journal.json."""
    # Start-up time: `faultday --help` loads this module; the game day and renderers load on use.
    from faultday.report.preflight import is_preflight, render_preflight  # noqa: PLC0415
    from faultday.report.render import render_all  # noqa: PLC0415

    if not (run_dir / JOURNAL_NAME).is_file():
        raise UsageError(f"{run_dir}: no {JOURNAL_NAME} here (is it a run folder?)")
    try:
        journal = read_journal(run_dir)
    except ValueError as exc:  # pydantic's ValidationError and JSON errors
        raise UsageError(f"{run_dir / JOURNAL_NAME}: not a journal: {exc}") from exc
    if is_preflight(journal):  # a preflight's folder: its own page, not a run's
        journal.artifacts.update(render_preflight(journal, run_dir))
        journal.write(run_dir)
        errors: list[str] = []
    else:
        errors = render_all(journal, run_dir)
    for err in errors:
        console.print(f"[red]report error[/] {err}", soft_wrap=True)
    for name, file in sorted(journal.artifacts.items()):
        out.print(f"{name}: {run_dir / file}")
    if errors:
        raise typer.Exit(ExitCode.ERROR)


@runbook_app.command("render")
def runbook_render(
    *,
    stack: Annotated[
        str, typer.Option("--stack", help="Stack profile: local, k8s, docker or a path.")
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the Markdown and HTML.")],
    results: Annotated[
        Path | None,
        typer.Option("--results", help="A game-day folder: quote its measured numbers."),
    ] = None,
    driver: Annotated[
        str | None, typer.Option("--driver", help="local, docker or k8s (default: from --stack).")
    ] = None,
    name: Annotated[
        list[str] | None, typer.Option("--name", help="Only this runbook (repeatable).")
    ] = None,
) -> None:
    """Write runbooks filled with a stack's facts (and a game day's numbers)."""
    # Start-up time: `faultday --help` loads this module; the game day and renderers load on use.
    from faultday.gameday import facts_from_profile  # noqa: PLC0415
    from faultday.report import runbooks as rb  # noqa: PLC0415
    from faultday.report.gameday import measured, read_gameday  # noqa: PLC0415

    base = Path.cwd()
    rdir = rb.find_runbook_dir(base)
    if rdir is None:
        raise UsageError("no runbooks/ folder with runbook templates here")
    facts = facts_from_profile(stack, base_dir=base, driver=driver)
    numbers = measured(read_gameday(results)) if results is not None else []
    done = rb.render_runbooks(
        facts=facts, runbook_dir=rdir, out_dir=out_dir, results=numbers, names=name or None
    )
    for r in done:
        out.print(f"{r.name}: {r.markdown} {r.html}")
    out.print(f"index: {out_dir / 'index.html'}")


def gameday(
    *,
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Scenario files or folders (default: scenarios/).")
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Only scenarios with this tag.")
    ] = None,
    time_scale: Annotated[
        float,
        typer.Option("--time-scale", min=0.001, max=100.0, help="Compress every scenario time."),
    ] = 1.0,
    report_dir: Annotated[Path, typer.Option("--report-dir", help="Where game days go.")] = Path(
        "reports"
    ),
    fresh_stack: Annotated[
        bool, typer.Option("--fresh-stack", help="A new stack per scenario (no reuse).")
    ] = False,
    runbook_stack: Annotated[
        str | None, typer.Option("--runbook-stack", help="Profile the runbooks are rendered for.")
    ] = None,
    progress: Annotated[
        bool | None,
        typer.Option("--progress/--no-progress", help="Live display (default: on a TTY)."),
    ] = None,
    skip_preflight: Annotated[
        bool,
        typer.Option(
            "--skip-preflight", help="Start without `faultday preflight` of the stack first."
        ),
    ] = False,
) -> None:
    """Run a suite of scenarios; write the scorecard, trend, JUnit and runbooks.

    The first scenario's stack is checked first (``faultday preflight``); the game day
    refuses to start on a failure unless ``--skip-preflight`` is given."""
    # Start-up time: `faultday --help` loads this module; the game day and renderers load on use.
    from faultday.core.events import RunEvents  # noqa: PLC0415
    from faultday.gameday import run_gameday  # noqa: PLC0415
    from faultday.report.view import scenario_name  # noqa: PLC0415
    from faultday.session import SignalPolicy  # noqa: PLC0415

    show = sys.stderr.isatty() if progress is None else progress
    policy = SignalPolicy(say=lambda text: console.print(f"[yellow]{text}[/]"))

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not show,
    )
    tasks: dict[str, TaskID] = {}
    events = RunEvents()

    @events.scenario_started.add_listener
    def on_start(ev: ScenarioStarted) -> None:
        if "all" not in tasks:
            tasks["all"] = bar.add_task("game day", total=ev.total)
        if "one" in tasks:
            bar.remove_task(tasks.pop("one"))
        tasks["one"] = bar.add_task(f"  {ev.scenario}", total=None)
        if not show:
            console.print(f"[{ev.index + 1}/{ev.total}] {ev.scenario} …")

    @events.status.add_listener
    def on_status(st: Status) -> None:
        if "one" in tasks:
            bar.update(
                tasks["one"],
                total=max(1.0, st.duration),
                completed=max(0.0, st.t),
                description=f"  {st.phase} · faults: {', '.join(st.active_faults) or '—'}",
            )

    @events.scenario_ended.add_listener
    def on_done(ev: ScenarioEnded) -> None:
        if "all" in tasks:
            bar.advance(tasks["all"])
        journal = ev.journal
        v = journal.verdict
        colour = {"passed": "green", "failed": "red"}.get(v, "yellow")
        bar.console.print(f"[{colour}]{v.upper():8}[/] {scenario_name(journal)} — {journal.reason}")

    @events.preflight_started.add_listener
    def on_preflight(ev: PreflightStarted) -> None:
        profile = ev.profile
        if Path(profile).is_relative_to(Path.cwd()):
            profile = str(Path(profile).relative_to(Path.cwd()))
        tasks["preflight"] = bar.add_task(f"preflight of {profile}", total=None)
        if not show:
            console.print(f"preflight of {profile} …")

    @events.preflight_done.add_listener
    def on_preflight_done(pre: PreflightDone) -> None:
        if "preflight" in tasks:
            bar.remove_task(tasks.pop("preflight"))
        colour = {"passed": "green", "skipped": "dim"}.get(pre.verdict, "red")
        bar.console.print(f"[{colour}]{pre.verdict.upper():8}[/] preflight — {escape(pre.reason)}")

    with policy.installed(), bar:
        gd, folder = run_gameday(
            paths or [Path("scenarios")],
            tags=tag or (),
            time_scale=time_scale,
            report_dir=report_dir,
            reuse_stack=not fresh_stack,
            runbook_stack=runbook_stack,
            events=events,
            signals=policy,
            preflight=not skip_preflight,
        )
    pre = gd.preflight
    if pre is not None and not pre.verdict.lets_the_game_day_start:
        for line in pre.problems:
            console.print(f"  [red]✗[/] preflight {escape(line)}", soft_wrap=True)
        console.print(
            f"[red]preflight {pre.verdict}[/]: {escape(pre.reason)} — the game day did not start"
            " (--skip-preflight starts it anyway)"
        )
    score = "—" if gd.score is None else f"{gd.score:.1f}"
    console.print(
        f"game day {gd.verdict.upper()} — resilience score {score}"
        + (f" (previous {gd.previous})" if gd.previous else "")
    )
    out.print(f"index: {folder / 'index.html'}")
    raise typer.Exit(VERDICT_EXIT[gd.verdict])

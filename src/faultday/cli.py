"""The ``faultday`` command. The only place that turns exceptions into exit codes.

Exit codes (``faultday.core.exits``, also in the README): 0 passed, 1 checks failed,
2 invalid input, 3 aborted, 4 harness or stack error. The sub-commands in other
modules (``stack``, ``k8s``, ``report``, ``lint`` …) raise; ``main`` maps.
"""

from __future__ import annotations

import importlib
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from faultday import __version__
from faultday.checks.base import check_registry
from faultday.core.exits import VERDICT_EXIT, ExitCode
from faultday.core.journal import Journal
from faultday.errors import FaultdayError, ScenarioError, StackError, UsageError
from faultday.injectors.base import injector_registry
from faultday.scenario.loader import LoadedScenario, find_scenarios, load_scenario
from faultday.scenario.schema import schema_text

if TYPE_CHECKING:
    from faultday.session import Settings

console = Console(stderr=True, highlight=False)
out = Console(highlight=False)


app = typer.Typer(
    name="faultday",
    help="Game days for AI stacks: inject faults, assert graceful degradation, report.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
list_app = typer.Typer(help="List plugins.", no_args_is_help=True)
app.add_typer(list_app, name="list")


@dataclass(frozen=True, slots=True)
class SubCommands:
    """Commands that live next to their code, in a module imported at start-up.

    The module exposes ``register(app)`` (adds ``names`` itself) or an ``app``
    (added as the group ``names[0]``).
    """

    module: str
    names: tuple[str, ...]
    help: str = ""


SUBCOMMANDS = (
    SubCommands("faultday.proxy.cli", ("proxy",), "The Toxiproxy-compatible fault proxy."),
    SubCommands("faultday.cli_stack", ("stack",), "Bring the reference stack up and down."),
    SubCommands("faultday.observe.traces_cli", ("traces",), "The OTLP/HTTP trace collector."),
    SubCommands("faultday.stack.sim", ("sim",), "Simulated components (the vLLM simulator)."),
    SubCommands("faultday.cli_lint", ("lint",)),
    SubCommands("faultday.cli_report", ("report", "gameday", "runbook")),
    SubCommands("faultday.cli_k8s", ("k8s",)),
    SubCommands("faultday.cli_preflight", ("preflight",)),
)


class CommandUnavailable(FaultdayError):
    """A sub-command whose module could not be imported (an optional extra missing)."""


def _add_optional_apps() -> None:
    """Add every sub-command module's commands; one that cannot be imported is listed
    as unavailable, with its import error, instead of vanishing or breaking the rest."""
    have = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    for sub in SUBCOMMANDS:
        if have & set(sub.names):
            continue  # added by an earlier call (tests build the app more than once)
        try:
            mod = importlib.import_module(sub.module)
        except ImportError as exc:
            logging.getLogger(__name__).debug("no %s commands: %s", sub.module, exc)
            for name in sub.names:
                _add_unavailable(name, sub.module, exc)
            continue
        if hasattr(mod, "register"):
            mod.register(app)
        else:
            app.add_typer(mod.app, name=sub.names[0], help=sub.help)


def _add_unavailable(name: str, module: str, exc: ImportError) -> None:
    why = f"{module} failed to import: {exc}"

    # Any arguments are accepted, so `faultday proxy serve --port 1` reaches the error.
    @app.command(
        name,
        help=f"UNAVAILABLE: {why}",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )
    def unavailable() -> None:
        raise CommandUnavailable(f"faultday {name} is unavailable: {why}")


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(
        level=max(level, logging.DEBUG), format="%(levelname)s %(name)s: %(message)s"
    )


@app.callback()
def _root(
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="More log output.")
    ] = 0,
) -> None:
    _setup_logging(verbose)


@app.command()
def version() -> None:
    """Print faultday's version."""
    out.print(__version__)


def _print_problems(exc: ScenarioError) -> None:

    for p in exc.problems:
        console.print(f"[bold red]error[/] {escape(str(p))}", soft_wrap=True)


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="Scenario files or folders (recursive).")],
) -> None:
    """Check scenarios; report every problem with file:line:col."""
    # Start-up time: every command loads this module; the engine loads only where it is used.
    from faultday.session import target_resolver  # noqa: PLC0415

    files = find_scenarios(paths)
    if not files:
        raise UsageError(f"no *.scenario.yaml files in {', '.join(map(str, paths))}")
    resolver = target_resolver(Path.cwd())
    bad = 0
    for f in files:
        try:
            load_scenario(f, resolve_targets=resolver)
        except ScenarioError as exc:
            bad += 1
            _print_problems(exc)
            continue
        out.print(f"[green]ok[/] {f}")
    if bad:
        console.print(f"{bad} of {len(files)} scenarios invalid")
        raise typer.Exit(ExitCode.INVALID)


@app.command()
def schema(
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Print the JSON Schema of the scenario format."""

    text = schema_text()
    if out_file is None:
        sys.stdout.write(text)
    else:
        out_file.write_text(text)


@list_app.command("injectors")
def list_injectors() -> None:
    """Injectors by short name (``inject:`` in a scenario)."""

    _plugin_table(injector_registry().describe(), "injector")


@list_app.command("checks")
def list_checks() -> None:
    """Checks by short name (``check:`` in a scenario)."""

    _plugin_table(check_registry().describe(), "check")


def _plugin_table(infos: list, kind: str) -> None:  # type: ignore[type-arg]
    table = Table(kind, "summary", box=None, pad_edge=False)
    for info in infos:
        summary = info.summary if info.available else f"[yellow]unavailable:[/] {info.summary}"
        table.add_row(info.name, summary)
    out.print(table)


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="A *.scenario.yaml file.")],
    time_scale: Annotated[
        float,
        typer.Option("--time-scale", min=0.001, max=100.0, help="Compress every scenario time."),
    ] = 1.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; start nothing.")
    ] = False,
    report_dir: Annotated[Path, typer.Option("--report-dir", help="Where run folders go.")] = Path(
        "reports"
    ),
    stack: Annotated[str | None, typer.Option("--stack", help="Override spec.stack.")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="Override spec.policy.")] = None,
    progress: Annotated[
        bool | None,
        typer.Option("--progress/--no-progress", help="Live display (default: on a TTY)."),
    ] = None,
    driver: Annotated[
        str, typer.Option("--driver", help="Stack driver: process, docker or kubernetes.")
    ] = "process",
    driver_config: Annotated[
        Path | None, typer.Option("--driver-config", help="The driver's settings file.")
    ] = None,
) -> None:
    """Run one scenario and write its journal and reports."""
    # Imported here for start-up time: the engine, its plugins and the stack driver.
    from faultday.session import Overrides, Settings, target_resolver  # noqa: PLC0415

    overrides = Overrides(stack=stack, policy=policy)
    loaded = overrides.apply(load_scenario(scenario, resolve_targets=target_resolver(Path.cwd())))
    if dry_run:
        # Start-up time: every command loads this module; the engine loads only where it is used.
        from faultday.engine.dryrun import render_plan  # noqa: PLC0415
        from faultday.engine.plan import make_plan  # noqa: PLC0415

        out.print(
            render_plan(
                make_plan(loaded.scenario, time_scale=time_scale),
                base_dir=Path.cwd(),
                scenario_file=loaded.file,
                driver=driver,
                driver_config=driver_config,
            )
        )
        return
    settings = Settings(
        report_dir=report_dir,
        base_dir=Path.cwd(),
        time_scale=time_scale,
        driver=driver,
        driver_config=driver_config,
    )
    journal = _execute(loaded, settings=settings, progress=progress)
    _summarize(journal)
    raise typer.Exit(VERDICT_EXIT[journal.verdict])


def _execute(loaded: LoadedScenario, *, settings: Settings, progress: bool | None) -> Journal:
    # Start-up time: every command loads this module; the engine loads only where it is used.
    from faultday.core.events import RunEvents  # noqa: PLC0415
    from faultday.engine.display import StatusView  # noqa: PLC0415
    from faultday.session import SignalPolicy, check_driver, run_scenario  # noqa: PLC0415

    check_driver(settings.driver)  # before the signal handler and the display start
    view = StatusView(loaded.scenario)
    show = sys.stderr.isatty() if progress is None else progress
    live = Live(view, console=console, refresh_per_second=4, transient=True)
    events = RunEvents()
    events.run_started.add_listener(lambda ev: console.print(f"run folder: {ev.run_dir}"))
    events.status.add_listener(view.update)
    if show:
        # Shown while the run executes; gone before the reports are rendered.
        events.run_started.add_listener(lambda _: live.start())
        events.scenario_ended.add_listener(lambda _: live.stop())
    policy = SignalPolicy(say=lambda text: console.print(f"[yellow]{text}[/]"))
    # Installed for the rendering too: a signal there must not lose the report.
    with policy.installed():
        try:
            outcome = run_scenario(loaded, settings=settings, signals=policy, events=events)
        finally:
            live.stop()  # idempotent; a run that raised must not leave the display running
        for err in outcome.report_errors:
            console.print(f"[red]report error[/] {err}")
    return outcome.journal


def _summarize(journal: Journal) -> None:
    colour = {"passed": "green", "failed": "red", "aborted": "yellow"}.get(journal.verdict, "red")
    for c in journal.checks:
        if c.verdict != "passed":
            line = f"{c.window}: {c.label}"
            if c.expected:
                line += f" expected {c.expected}"
            if c.observed:
                line += f", observed {c.observed}"
            line += f" (n={c.n})"
            if c.message:
                line += f" — {c.message}"
            console.print(f"  [red]✗[/] {line}", soft_wrap=True)
    passed = sum(1 for c in journal.checks if c.verdict == "passed")
    console.print(
        f"[bold {colour}]{journal.verdict.upper()}[/] {Path(journal.run_dir).name}"
        f" — {journal.reason} ({passed}/{len(journal.checks)} checks passed)"
    )
    report = Path(journal.run_dir) / journal.artifacts.get("report.html", "journal.json")
    out.print(f"report: {report}")


@app.command()
def recover(
    run_dir: Annotated[
        Path | None, typer.Argument(help="A run folder; default: every run under --report-dir.")
    ] = None,
    report_dir: Annotated[Path, typer.Option("--report-dir")] = Path("reports"),
    keep_processes: Annotated[
        bool,
        typer.Option("--keep-processes", help="Revert faults but leave stack processes running."),
    ] = False,
) -> None:
    """Undo every fault still outstanding after a crashed harness; stop its processes."""
    # Start-up time: every command loads this module; the engine loads only where it is used.
    from faultday.engine.recover import find_ledgers, recover_run  # noqa: PLC0415

    dirs = [run_dir] if run_dir is not None else find_ledgers(report_dir)
    if run_dir is not None and not (run_dir / "ledger.jsonl").exists():
        raise UsageError(f"{run_dir}: no ledger.jsonl here (is it a run folder?)")
    failed = 0
    for d in dirs:
        result = recover_run(d, stop_processes=not keep_processes)
        for line in result.messages:
            out.print(f"{d.name}: {line}")
        failed += result.failed
    if not dirs:
        out.print("nothing to recover")
    if failed:
        console.print(
            f"[red]{failed} reverts, cleanups or process stops failed[/]: they stay outstanding"
            " in the ledger; fix the cause and run `faultday recover` again"
        )
        raise typer.Exit(ExitCode.ERROR)


def main() -> None:
    """Entry point: run the app and map errors to exit codes."""
    _add_optional_apps()
    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int):
            sys.exit(rc)
    except ScenarioError as exc:
        _print_problems(exc)
        sys.exit(ExitCode.INVALID)
    except UsageError as exc:
        console.print(f"[bold red]error[/] {exc}")
        sys.exit(ExitCode.INVALID)
    except StackError as exc:
        console.print(f"[bold red]stack error[/] {exc}", soft_wrap=True)
        sys.exit(ExitCode.ERROR)
    except FaultdayError as exc:
        console.print(f"[bold red]error[/] {exc}", soft_wrap=True)
        sys.exit(ExitCode.ERROR)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(ExitCode.ABORTED)
    except KeyboardInterrupt:
        sys.exit(ExitCode.ABORTED)
    except typer.TyperException as exc:  # click's usage errors, as typer vendors them
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            console.print(f"[bold red]error[/] {exc}")
        sys.exit(ExitCode.INVALID)


if __name__ == "__main__":
    main()

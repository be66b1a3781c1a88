"""The ``faultday`` command. The only place that turns exceptions into exit codes.

Exit codes (also in the README): 0 passed, 1 checks failed, 2 invalid input,
3 aborted, 4 harness or stack error.
"""

from __future__ import annotations

import logging
import sys
from enum import IntEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from faultday import __version__
from faultday.core.journal import Journal, RunVerdict
from faultday.errors import FaultdayError, ScenarioError, StackError, UsageError
from faultday.scenario.loader import LoadedScenario

console = Console(stderr=True, highlight=False)
out = Console(highlight=False)


class Exit(IntEnum):
    PASSED = 0
    FAILED = 1
    INVALID = 2
    ABORTED = 3
    ERROR = 4


VERDICT_EXIT = {
    RunVerdict.PASSED: Exit.PASSED,
    RunVerdict.FAILED: Exit.FAILED,
    RunVerdict.ABORTED: Exit.ABORTED,
    RunVerdict.ERROR: Exit.ERROR,
    RunVerdict.RUNNING: Exit.ERROR,
}

app = typer.Typer(
    name="faultday",
    help="Game days for AI stacks: inject faults, assert graceful degradation, report.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
list_app = typer.Typer(help="List plugins.", no_args_is_help=True)
app.add_typer(list_app, name="list")


def _add_optional_apps() -> None:
    """Commands that live next to their code.

    A module either exposes ``register(app)`` (adds its own commands) or an
    ``app`` (added as a command group). One that cannot be imported (an
    optional extra missing) is left out rather than breaking the command.
    """
    import importlib

    subapps = [
        ("faultday.proxy.cli", "proxy", "The Toxiproxy-compatible fault proxy."),
        ("faultday.stack.cli", "stack", "Bring the reference stack up and down."),
        ("faultday.stack.sim", "sim", "Simulated components (the vLLM simulator)."),
        ("faultday.checks.cli", "", ""),  # faultday lint
        ("faultday.report.cli", "", ""),  # faultday report, runbook, gameday
        ("faultday.cluster.cli", "", ""),  # faultday k8s plan|rbac|manifests
    ]
    for module, name, help_text in subapps:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            logging.getLogger(__name__).debug("no %s commands: %s", module, exc)
            continue
        if hasattr(mod, "register"):
            mod.register(app)
        else:
            app.add_typer(mod.app, name=name, help=help_text)


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


def _target_resolver(base_dir: Path):  # type: ignore[no-untyped-def]
    """Targets of a stack profile (components and edges), for validation and dry runs."""
    try:
        from faultday.stack.profile import EDGE_SEP, load_profile
    except ImportError:
        return None
    from faultday.core.targets import TargetKind

    def resolve(stack: str) -> dict[str, TargetKind]:
        profile = load_profile(stack, base_dir=base_dir)
        return {
            n: TargetKind.EDGE if EDGE_SEP in n else TargetKind.COMPONENT
            for n in profile.target_names()
        }

    return resolve


def _print_problems(exc: ScenarioError) -> None:
    from rich.markup import escape  # a user's key or value may read "[/x]": text, not markup

    for p in exc.problems:
        console.print(f"[bold red]error[/] {escape(str(p))}", soft_wrap=True)


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="Scenario files or folders (recursive).")],
) -> None:
    """Check scenarios; report every problem with file:line:col."""
    from faultday.scenario.loader import find_scenarios, load_scenario

    files = find_scenarios(paths)
    if not files:
        raise UsageError(f"no *.scenario.yaml files in {', '.join(map(str, paths))}")
    resolver = _target_resolver(Path.cwd())
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
        raise typer.Exit(Exit.INVALID)


@app.command()
def schema(
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Print the JSON Schema of the scenario format."""
    from faultday.scenario.schema import schema_text

    text = schema_text()
    if out_file is None:
        sys.stdout.write(text)
    else:
        out_file.write_text(text)


@list_app.command("injectors")
def list_injectors() -> None:
    """Injectors by short name (``inject:`` in a scenario)."""
    from faultday.injectors.base import injector_registry

    _plugin_table(injector_registry().describe(), "injector")


@list_app.command("checks")
def list_checks() -> None:
    """Checks by short name (``check:`` in a scenario)."""
    from faultday.checks.base import check_registry

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
    from faultday.engine.plan import make_plan
    from faultday.scenario.loader import load_scenario

    loaded = load_scenario(scenario, resolve_targets=_target_resolver(Path.cwd()))
    if stack or policy:
        spec = loaded.scenario.spec.model_copy(
            update={k: v for k, v in (("stack", stack), ("policy", policy)) if v}
        )
        loaded = type(loaded)(
            scenario=loaded.scenario.model_copy(update={"spec": spec}),
            file=loaded.file,
            document=loaded.document,
        )
    if dry_run:
        from faultday.engine.dryrun import render_plan

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
    from faultday.core.plugins import DRIVERS, Registry, did_you_mean

    drivers: Registry[object] = Registry(DRIVERS, "driver")
    if driver not in drivers:
        raise UsageError(f"--driver: no driver {driver!r}{did_you_mean(driver, drivers.names())}")
    journal = _execute(
        loaded,
        time_scale=time_scale,
        report_dir=report_dir,
        progress=progress,
        driver=driver,
        driver_config=driver_config,
    )
    _summarize(journal)
    raise typer.Exit(VERDICT_EXIT[journal.verdict])


def _execute(
    loaded: LoadedScenario,
    *,
    time_scale: float,
    report_dir: Path,
    progress: bool | None,
    driver: str = "process",
    driver_config: Path | None = None,
) -> Journal:
    from faultday.engine.display import StatusView
    from faultday.engine.interrupts import SignalPolicy
    from faultday.engine.runner import Run, RunOptions
    from faultday.engine.stacks import default_stack_factory
    from faultday.report.render import render_all

    view = StatusView(loaded.scenario)
    show = sys.stderr.isatty() if progress is None else progress
    options = RunOptions(
        time_scale=time_scale,
        report_dir=report_dir,
        base_dir=Path.cwd(),
        driver=driver,
        driver_config=driver_config,
    )
    options.on_status = view.update
    the_run = Run(loaded, options)
    console.print(f"run folder: {the_run.run_dir}")
    policy = SignalPolicy(say=lambda text: console.print(f"[yellow]{text}[/]"))
    policy.attach(the_run)
    # Installed for the rendering too: a signal there must not lose the report.
    with policy.installed():
        if show:
            with Live(view, console=console, refresh_per_second=4, transient=True):
                journal = the_run.execute(default_stack_factory)
        else:
            journal = the_run.execute(default_stack_factory)
        for err in render_all(journal, Path(journal.run_dir)):
            console.print(f"[red]report error[/] {err}")
    return journal


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
    from faultday.engine.recover import find_ledgers, recover_run

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
        raise typer.Exit(Exit.ERROR)


def main() -> None:
    """Entry point: run the app and map errors to exit codes."""
    _add_optional_apps()
    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int):
            sys.exit(rc)
    except ScenarioError as exc:
        _print_problems(exc)
        sys.exit(Exit.INVALID)
    except UsageError as exc:
        console.print(f"[bold red]error[/] {exc}")
        sys.exit(Exit.INVALID)
    except StackError as exc:
        console.print(f"[bold red]stack error[/] {exc}", soft_wrap=True)
        sys.exit(Exit.ERROR)
    except FaultdayError as exc:
        console.print(f"[bold red]error[/] {exc}", soft_wrap=True)
        sys.exit(Exit.ERROR)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(Exit.ABORTED)
    except KeyboardInterrupt:
        sys.exit(Exit.ABORTED)
    except typer.TyperException as exc:  # click's usage errors, as typer vendors them
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            console.print(f"[bold red]error[/] {exc}")
        sys.exit(Exit.INVALID)


if __name__ == "__main__":
    main()

"""``faultday stack up|down|status|logs|render``: the reference stack from a shell.

``up`` starts the stack and returns (the processes keep running in their own
sessions); its ledger and a state file in ``.faultday/stack/<profile>/`` let a
later ``status`` or ``down`` — from another shell — find every process by PID.
``up --foreground`` supervises (restarts on failure) until Ctrl-C instead.
Errors are raised to ``faultday.cli``, which maps them to the README's exit codes.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Annotated

import psutil
import typer
from rich.console import Console
from rich.table import Table

from faultday.cli_docker import build_images, docker_down, docker_status, docker_up
from faultday.cluster.docker_render import Images, render_compose
from faultday.cluster.k8s_render import write_manifests
from faultday.core.components import ProbeKind
from faultday.core.exits import ExitCode
from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile, load_profile
from faultday.errors import StackError, UsageError
from faultday.stack.stack import Stack as ProcessStack
from faultday.stack.stack import StackInfo
from faultday.stack.supervisor import HOST, probe_once, tail
from faultday.stack.tinymodel import make_tiny_model_command

app = typer.Typer(help="Bring the reference stack up and down.", no_args_is_help=True)
app.command("make-tiny-model")(make_tiny_model_command)
console = Console()
err = Console(stderr=True)

STATE_FILE = "state.json"
STATE_ROOT = Path(".faultday") / "stack"

ProfileOpt = Annotated[
    str, typer.Option("--profile", "-p", help="Profile name (stack/<name>.yaml) or path.")
]
DriverOpt = Annotated[str, typer.Option(help="Stack driver: process or docker.")]
StateOpt = Annotated[
    Path | None,
    typer.Option("--state-dir", help="Where the run folder lives [.faultday/stack/<profile>]."),
]


def _load(profile: str, only: str) -> StackProfile:
    p = load_profile(profile, base_dir=Path.cwd())
    return p.subset([c.strip() for c in only.split(",") if c.strip()]) if only else p


def _state_dir(profile: str, state_dir: Path | None) -> Path:
    if state_dir is not None:
        return state_dir
    name = Path(profile).stem if profile.endswith((".yaml", ".yml")) else profile
    return STATE_ROOT / name


def _read_state(run_dir: Path) -> tuple[StackInfo, dict[str, object]] | None:
    f = run_dir / STATE_FILE
    if not f.is_file():
        return None
    raw = json.loads(f.read_text())
    return StackInfo.model_validate(raw["info"]), raw


def _alive_records(run_dir: Path) -> list[int]:
    alive = []
    for rec in Ledger.in_dir(run_dir).outstanding_processes():
        try:
            if abs(psutil.Process(rec.pid).create_time() - rec.create_time) < 0.05:
                alive.append(rec.pid)
        except psutil.Error:
            continue
    return alive


@app.command()
def up(  # noqa: PLR0917 - typer options, never called positionally
    profile: ProfileOpt = "local",
    only: Annotated[
        str, typer.Option(help="Comma-separated components (plus what they need).")
    ] = "",
    policy: Annotated[str | None, typer.Option(help="Agent policy (default, naive).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for all-healthy.")] = 120.0,
    foreground: Annotated[
        bool, typer.Option(help="Stay attached: restart on failure, stop on Ctrl-C.")
    ] = False,
    state_dir: StateOpt = None,
    driver: DriverOpt = "process",
    image: Annotated[
        str | None, typer.Option(help="docker: faultday's image [$FAULTDAY_IMAGE].")
    ] = None,
) -> None:
    """Start the stack; print components, endpoints and edges."""
    run_dir = _state_dir(profile, state_dir).resolve()
    prof = _load(profile, only)
    if driver == "docker":
        _docker_up(
            prof, run_dir, profile=profile, only=only, policy=policy, timeout=timeout, image=image
        )
        return
    if driver != "process":
        raise UsageError(f"unknown driver {driver!r} for `stack up`: process or docker")
    if _alive_records(run_dir):
        raise StackError(f"already up (run folder {run_dir}); run `faultday stack down` first")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / STATE_FILE).unlink(missing_ok=True)
    (run_dir / "ledger.jsonl").unlink(missing_ok=True)
    stack = ProcessStack(prof, run_dir=run_dir, ledger=Ledger.in_dir(run_dir), policy=policy)
    t0 = time.monotonic()
    with console.status(f"starting {len(prof.spec.components)} components…"):
        stack.up(timeout=timeout)
    took = time.monotonic() - t0
    info = stack.describe()
    state = {"info": info.model_dump(mode="json"), "profile": profile, "only": only}
    (run_dir / STATE_FILE).write_text(json.dumps(state, indent=2))
    _print_info(info)
    console.print(f"[green]up[/] in {took:.1f}s — run folder {run_dir}")
    if not foreground:
        return
    _supervise(stack)


def _docker_up(
    prof: StackProfile,
    run_dir: Path,
    *,
    profile: str,
    only: str,
    policy: str | None,
    timeout: float,
    image: str | None,
) -> None:

    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with console.status(f"starting {len(prof.spec.components)} containers…"):
        info = docker_up(prof, run_dir, policy=policy, timeout=timeout, image=image)
    took = time.monotonic() - t0
    state = {"info": info.model_dump(mode="json"), "profile": profile, "only": only}
    (run_dir / STATE_FILE).write_text(json.dumps({**state, "driver": "docker"}, indent=2))
    _print_info(info)
    console.print(f"[green]up[/] in {took:.1f}s (docker) — run folder {run_dir}")


def _supervise(stack: ProcessStack) -> None:
    stop = threading.Event()

    def on_signal(_sig: int, _frame: object) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    console.print("supervising; Ctrl-C stops the stack")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        stack.down()
        (Path(stack.run_dir) / STATE_FILE).unlink(missing_ok=True)
        console.print("[green]down[/]")


@app.command()
def status(
    profile: ProfileOpt = "local",
    state_dir: StateOpt = None,
    output: Annotated[
        str, typer.Option("--output", "-o", help="table, or json (StackInfo) for scripts.")
    ] = "table",
) -> None:
    """Components, ports, PIDs, health and edges of a stack started with `up`."""
    if output not in ("table", "json"):
        raise UsageError(f"--output {output!r}: table or json")
    run_dir = _state_dir(profile, state_dir).resolve()
    state = _read_state(run_dir)
    if state is None:
        console.print(f"not up (no {STATE_FILE} in {run_dir})")
        raise typer.Exit(ExitCode.FAILED)
    info, raw = state
    prof = _load(str(raw["profile"]), str(raw.get("only", "")))
    if raw.get("driver") == "docker":
        now = docker_status(prof, run_dir)
        _show(now, output)
        if not any(c.health == "ready" for c in now.components):
            raise typer.Exit(ExitCode.FAILED)
        return
    alive = set(_alive_records(run_dir))
    comps = []
    for c in info.components:
        health = "down"
        if c.pid in alive:
            probe = prof.probe(c.name)
            port = c.ports.get(probe.port, 0) if probe.kind != ProbeKind.NONE else 0
            ready = probe_once(probe, host=HOST, port=port, timeout=0.5)
            health = "ready" if ready else "unready"
            if psutil.Process(c.pid).status() == psutil.STATUS_STOPPED:
                health = "paused"
        comps.append(c.model_copy(update={"health": health}))
    _show(info.model_copy(update={"components": tuple(comps)}), output)
    if not alive:
        raise typer.Exit(ExitCode.FAILED)


@app.command()
def down(profile: ProfileOpt = "local", state_dir: StateOpt = None) -> None:
    """Stop every process the last `up` started (by process group, verified PIDs)."""
    run_dir = _state_dir(profile, state_dir).resolve()
    ledger_file = run_dir / "ledger.jsonl"
    if not ledger_file.exists():
        console.print(f"nothing to stop in {run_dir}")
        return
    state = _read_state(run_dir)
    if state is not None and state[1].get("driver") == "docker":
        t0 = time.monotonic()
        docker_down(_load(str(state[1]["profile"]), str(state[1].get("only", ""))), run_dir)
        (run_dir / STATE_FILE).unlink(missing_ok=True)
        console.print(f"[green]down[/] in {time.monotonic() - t0:.1f}s (docker)")
        return
    # Start-up time: every command loads this module; the engine loads only where it is used.
    from faultday.engine.recover import RecoverResult, stop_run_processes  # noqa: PLC0415

    t0 = time.monotonic()
    result = RecoverResult()
    # By record, then by marker, and the temporary folders with them: like recover.
    for m in stop_run_processes(Ledger.in_dir(run_dir), result):
        console.print(f"  {m}", highlight=False)
    (run_dir / STATE_FILE).unlink(missing_ok=True)
    if result.failed:
        err.print(f"[red]{result.failed} processes could not be stopped[/]")
        raise typer.Exit(ExitCode.ERROR)
    console.print(f"[green]down[/] in {time.monotonic() - t0:.1f}s")


@app.command()
def logs(
    component: Annotated[str | None, typer.Argument(help="One component; default all.")] = None,
    profile: ProfileOpt = "local",
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines per component.")] = 20,
    state_dir: StateOpt = None,
) -> None:
    """The last lines of each component's log."""
    log_dir = _state_dir(profile, state_dir).resolve() / "logs"
    files = sorted(log_dir.glob("*.log"))
    if component is not None:
        files = [f for f in files if f.stem == component]
        if not files:
            known = ", ".join(f.stem for f in sorted(log_dir.glob("*.log"))) or "none"
            err.print(f"no log for {component!r} in {log_dir} (have: {known})")
            raise typer.Exit(ExitCode.FAILED)
    for f in files:
        console.rule(f"{f.stem} — {f}")
        for line in tail(f, lines):
            console.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command()
def render(
    driver: Annotated[str, typer.Option(help="docker or k8s.")],
    out: Annotated[Path, typer.Option(help="Folder to write into.")],
    profile: ProfileOpt = "local",
    images: Annotated[
        str, typer.Option(help="docker: official (vLLM, Triton…) or faultday (its own image).")
    ] = "official",
) -> None:
    """Write the profile as a docker compose file or Kubernetes manifests."""

    stack = load_profile(profile, base_dir=Path.cwd())
    if driver == "docker":
        chosen: Images = "faultday" if images == "faultday" else "official"
        written = render_compose(stack, out=out, images=chosen).files
    elif driver == "k8s":
        written = write_manifests(stack, out=out)
    else:
        raise UsageError(f"unknown driver {driver!r}; choose one of docker, k8s")
    for f in written:
        console.print(f"wrote {f}")


@app.command("build-images")
def build_images_command(
    offline: Annotated[
        bool, typer.Option(help="No registry: FROM a Debian base built here (debootstrap).")
    ] = False,
    image: Annotated[str | None, typer.Option(help="The tag [$FAULTDAY_IMAGE].")] = None,
) -> None:
    """Build faultday's image (docker-build/) from a wheelhouse made with pip."""

    build_images(offline=offline, image=image)


def _show(info: StackInfo, output: str) -> None:
    if output == "json":
        typer.echo(info.model_dump_json(indent=2))
    else:
        _print_info(info)


def _print_info(info: StackInfo) -> None:
    t = Table(title=f"stack {info.profile} (policy {info.policy})")
    for col in ("component", "type", "url", "ports", "pid", "health"):
        t.add_column(col)
    colour = {"ready": "green", "paused": "yellow"}
    for c in info.components:
        ports = " ".join(f"{k}={v}" for k, v in c.ports.items() if k != "port") or ""
        hc = colour.get(c.health, "red")
        t.add_row(c.name, c.type, c.url, ports, str(c.pid or ""), f"[{hc}]{c.health}[/]")
    console.print(t)
    if info.edges:
        e = Table(title="edges (through the fault proxy)")
        for col in ("edge", "listen", "upstream", "proxy"):
            e.add_column(col)
        for edge in info.edges:
            e.add_row(edge.name, edge.listen, edge.upstream, edge.proxy_name or "(direct)")
        console.print(e)

"""``faultday run --dry-run``: what would be injected where and when, and which checks run."""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from faultday.core.durations import format_duration
from faultday.core.ledger import Ledger
from faultday.core.profile import load_profile
from faultday.core.protocols import DryRunnable
from faultday.engine.plan import Plan
from faultday.engine.stacks import build_stack
from faultday.scenario.loader import stack_ref


def _t(seconds: float, scale: float) -> str:
    text = format_duration(seconds) if seconds else "0s"
    if scale != 1.0:
        text += f" ({format_duration(seconds * scale) if seconds else '0s'} wall)"
    return text


def render_plan(
    plan: Plan,
    *,
    base_dir: Path,
    scenario_file: Path,
    driver: str = "process",
    driver_config: Path | None = None,
) -> Group:
    """A printable plan; touches nothing but the stack profile file."""
    sc = plan.scenario
    spec = sc.spec
    parts: list[Table | Text] = [
        Text.assemble(
            ("dry run ", "bold"),
            (sc.name, "bold cyan"),
            f": stack {spec.stack}, {format_duration(spec.duration)} "
            f"(+{format_duration(spec.warmup)} warm-up), time scale {plan.time_scale:g}, "
            f"load {spec.load.workload} × {spec.load.users} users ({spec.load.shape})",
        )
    ]
    components = _components(stack_ref(spec.stack, scenario_file), base_dir)
    if components:
        parts.append(Text(f"components: {', '.join(components)}"))
    faults = Table(
        "fault", "inject", "target", "from", "until", "with", title="faults", title_justify="left"
    )
    for f in spec.faults:
        until = _t(f.end, plan.time_scale) if f.duration is not None else "one-shot"
        params = ", ".join(f"{k}={v}" for k, v in f.with_.items()) or "–"
        faults.add_row(f.name, f.inject, f.target, _t(f.at, plan.time_scale), until, params)
    parts.append(faults)
    checks = Table(
        "section",
        "check",
        "window",
        "from",
        "until",
        "params",
        title="checks",
        title_justify="left",
    )
    for section, check, window in plan.evaluations(sc):
        params = ", ".join(f"{k}={v}" for k, v in check.params.items()) or "–"
        checks.add_row(
            section,
            check.check,
            window.label,
            _t(window.start, plan.time_scale),
            _t(window.end, plan.time_scale),
            params,
        )
    for check in spec.abort:
        span = format_duration(check.for_) if check.for_ else "one sample"
        params = ", ".join(f"{k}={v}" for k, v in check.params.items()) or "–"
        checks.add_row("abort", check.check, f"any {span}", "0s", "end", params)
    parts.append(checks)
    parts += _driver_touches(
        plan,
        base_dir=base_dir,
        scenario_file=scenario_file,
        driver=driver,
        driver_config=driver_config,
    )
    parts.append(Text("nothing was started or changed.", style="dim"))
    return Group(*parts)


def _components(stack: str, base_dir: Path) -> list[str]:
    profile = load_profile(stack, base_dir=base_dir)
    return list(profile.start_order())


def _driver_touches(
    plan: Plan, *, base_dir: Path, scenario_file: Path, driver: str, driver_config: Path | None
) -> list[Table | Text]:
    """Objects a driver would change, for drivers that can say (``dry_run(scenario)``)."""
    if driver == "process":
        return []
    spec = plan.scenario.spec
    # The driver is only built (no connection is made); its folder is thrown away.
    with tempfile.TemporaryDirectory(prefix="faultday-dry-") as tmp:
        stack = build_stack(
            spec.stack,
            scenario_file=scenario_file,
            base_dir=base_dir,
            run_dir=Path(tmp),
            ledger=Ledger.in_dir(Path(tmp)),
            policy=spec.policy,
            driver=driver,
            driver_config=driver_config,
        )
    if not isinstance(stack, DryRunnable):
        return [Text(f"the {driver} driver cannot list the objects it would touch")]
    lines = [str(x) for x in stack.dry_run(plan.scenario)]
    return [Text(f"objects the {driver} driver would touch:", style="bold"), *map(Text, lines)]

"""Build the stack a scenario names, through the driver its profile asks for."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from faultday.errors import StackError
from faultday.scenario.loader import stack_ref

if TYPE_CHECKING:
    from faultday.engine.runner import Run


def build_stack(
    stack: str,
    *,
    scenario_file: Path,
    base_dir: Path,
    run_dir: Path,
    ledger: object,
    policy: str | None,
) -> object:
    """A Stack (process driver) for the profile ``stack`` names; not started yet."""
    try:
        from faultday.stack.profile import load_profile
        from faultday.stack.stack import Stack
    except ImportError as exc:
        raise StackError(f"the stack driver is not installed: {exc}") from exc
    profile = load_profile(stack_ref(stack, scenario_file), base_dir=base_dir)
    return Stack(profile, run_dir=run_dir, ledger=ledger, policy=policy)  # type: ignore[arg-type]


def default_stack_factory(run: Run) -> object:
    """The stack factory ``Run.execute`` uses by default."""
    spec = run.scenario.spec
    return build_stack(
        spec.stack,
        scenario_file=run.loaded.file,
        base_dir=run.options.base_dir,
        run_dir=run.run_dir,
        ledger=run.ledger,
        policy=spec.policy,
    )

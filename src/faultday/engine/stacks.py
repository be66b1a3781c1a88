"""Build the stack a scenario names, through the driver a run asks for."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultday.core.plugins import DRIVERS, Registry
from faultday.core.profile import load_profile
from faultday.core.protocols import ConfigurableDriver, StackDriver
from faultday.errors import FaultdayError, UsageError
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
    driver: str = "process",
    driver_config: Path | None = None,
) -> StackDriver:
    """A stack for the profile ``stack`` names, run by ``driver``; not started yet."""
    drivers: Registry[object] = Registry(DRIVERS, "driver")
    try:
        cls: Any = drivers.get(driver)
    except FaultdayError as exc:
        raise UsageError(str(exc)) from exc
    kwargs: dict[str, Any] = {}
    if driver_config is not None:
        if not isinstance(cls, ConfigurableDriver):
            raise UsageError(f"the {driver} driver takes no --driver-config")
        kwargs["config"] = cls.load_config(driver_config)
    profile = load_profile(stack_ref(stack, scenario_file), base_dir=base_dir)
    # Drivers differ in their settings (``config``); what they build is a StackDriver.
    built: StackDriver = cls(profile, run_dir=run_dir, ledger=ledger, policy=policy, **kwargs)
    return built


def default_stack_factory(run: Run) -> StackDriver:
    """The stack factory ``Run.execute`` uses by default."""
    spec = run.scenario.spec
    return build_stack(
        spec.stack,
        scenario_file=run.loaded.file,
        base_dir=run.options.base_dir,
        run_dir=run.run_dir,
        ledger=run.ledger,
        policy=spec.policy,
        driver=run.options.driver,
        driver_config=run.options.driver_config,
    )

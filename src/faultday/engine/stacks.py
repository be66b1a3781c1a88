"""Build the stack a scenario names, through the driver a run asks for."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultday.core.plugins import DRIVERS, Registry
from faultday.core.protocols import StackDriver
from faultday.errors import FaultdayError, StackError, UsageError
from faultday.scenario.loader import stack_ref

if TYPE_CHECKING:
    from faultday.core.journal import Journal
    from faultday.engine.runner import Run
    from faultday.scenario.loader import LoadedScenario

log = logging.getLogger(__name__)


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
    try:
        from faultday.stack.profile import load_profile
    except ImportError as exc:
        raise StackError(f"the stack driver is not installed: {exc}") from exc
    drivers: Registry[object] = Registry(DRIVERS, "driver")
    try:
        cls: Any = drivers.get(driver)
    except FaultdayError as exc:
        raise UsageError(str(exc)) from exc
    kwargs: dict[str, Any] = {}
    if driver_config is not None:
        loader = getattr(cls, "load_config", None)
        if loader is None:
            raise UsageError(f"the {driver} driver takes no --driver-config")
        kwargs["config"] = loader(driver_config)
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


class StackPool:
    """One stack shared by consecutive scenarios with the same stack and policy.

    Rebuilt when the next scenario wants another stack, and after a run that may
    have left it changed: one that did not pass cleanly, failed a revert, or
    left a component that is not ready.
    """

    def __init__(self, gameday_dir: Path, *, base_dir: Path, notes: list[str]) -> None:
        self.dir = gameday_dir
        self.base_dir = base_dir
        self.notes = notes
        self.key: tuple[str, str | None] | None = None
        self.stack: StackDriver | None = None
        self.count = 0

    def get(self, loaded: LoadedScenario) -> StackDriver:
        from faultday.core.ledger import Ledger
        from faultday.engine.stacks import build_stack
        from faultday.scenario.loader import stack_ref

        spec = loaded.scenario.spec
        key = (stack_ref(spec.stack, loaded.file), spec.policy)
        if self.stack is not None and key == self.key:
            return self.stack
        self.close()
        self.count += 1
        # Absolute: components get it on their command line and run in their own folders.
        folder = (self.dir / f"stack-{self.count}").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        stack = build_stack(
            spec.stack,
            scenario_file=loaded.file,
            base_dir=self.base_dir,
            run_dir=folder,
            ledger=Ledger.in_dir(folder),
            policy=spec.policy,
        )
        stack.up()
        self.stack, self.key = stack, key
        self.notes.append(
            f"stack {self.count} ({key[0]}, policy {key[1] or 'default'}) "
            f"up for {loaded.scenario.name}; logs in {folder.name}/"
        )
        return stack

    def after(self, journal: Journal) -> None:
        if self.stack is None:
            return
        why = ""
        from faultday.core.journal import RunVerdict

        if journal.verdict not in (RunVerdict.PASSED, RunVerdict.FAILED):
            why = f"run {journal.verdict}"
        elif any(f.revert_ok is False for f in journal.faults):
            why = "a revert failed"
        else:
            why = self._unready()
        if why:
            name = Path(journal.scenario_file).name
            self.notes.append(f"stack {self.count} restarted after {name}: {why}")
            self.close()

    def _unready(self) -> str:
        if self.stack is None:
            return ""
        try:
            info = self.stack.describe()
        except Exception as exc:  # noqa: BLE001 - a stack that cannot describe itself is not reused
            return f"cannot describe it: {exc}"
        bad = [c.name for c in info.components if c.health not in ("ready", "running")]
        return f"not ready: {', '.join(bad)}" if bad else ""

    def close(self) -> None:
        stack, self.stack, self.key = self.stack, None, None
        if stack is not None:
            try:
                stack.down()
            except Exception as exc:
                self.notes.append(f"stack down failed: {exc}")
                log.exception("stack down failed")

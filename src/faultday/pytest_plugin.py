"""pytest plugin: every ``*.scenario.yaml`` is a test item; fixtures for Python-written scenarios.

Collected through pytest's public non-Python-test hooks (``pytest_collect_file``,
``pytest.File``, ``pytest.Item``), never by patching private APIs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from faultday.core.events import RunEvents, RunStarted, ScenarioEnded
from faultday.core.journal import Journal, RunVerdict
from faultday.core.ledger import Ledger
from faultday.core.preflight import load_preflight_file
from faultday.core.profile import load_profile
from faultday.core.protocols import StackDriver
from faultday.core.targets import Revert, Target
from faultday.errors import ScenarioError
from faultday.injectors.base import injector_registry
from faultday.scenario.loader import SUFFIX, LoadedScenario, load_scenario

if TYPE_CHECKING:
    from faultday.session import StackPool

REPORT_KEY = pytest.StashKey[Path]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faultday", "faultday scenarios")
    group.addoption("--faultday-stack", default=None, help="override every scenario's spec.stack")
    group.addoption("--faultday-policy", default=None, help="override every scenario's spec.policy")
    group.addoption(
        "--faultday-time-scale", type=float, default=1.0, help="compress scenario time (e.g. 0.1)"
    )
    group.addoption("--faultday-report-dir", default="reports", help="where run folders go")
    group.addoption(
        "--faultday-fresh-stack",
        action="store_true",
        help="a new stack for every scenario (default: one shared while it stays healthy)",
    )


POOL_KEY = pytest.StashKey["StackPool | None"]()


def _pool(config: pytest.Config) -> StackPool | None:
    """The session's shared stack pool; restarts the stack after a scenario that changed it."""
    if config.getoption("faultday_fresh_stack"):
        return None
    if POOL_KEY not in config.stash:
        # Start-up time: every pytest session loads this plugin; the engine loads on use.
        from faultday.session import StackPool  # noqa: PLC0415

        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        folder = Path(config.getoption("faultday_report_dir")) / f"pytest-stacks-{stamp}"
        folder.mkdir(parents=True, exist_ok=True)
        config.stash[POOL_KEY] = StackPool(
            folder.resolve(), base_dir=config.invocation_params.dir, notes=[]
        )
    return config.stash[POOL_KEY]


def pytest_sessionfinish(session: pytest.Session) -> None:
    pool = session.config.stash.get(POOL_KEY, None)
    if pool is not None:
        pool.close()


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    if file_path.name.endswith(SUFFIX):
        return ScenarioFile.from_parent(parent, path=file_path)
    if file_path.name.endswith(PREFLIGHT_SUFFIX):
        return PreflightFile.from_parent(parent, path=file_path)
    return None


# ---- preflight files: `faultday preflight` as a test item ---------------------------------

PREFLIGHT_SUFFIX = ".preflight.yaml"


class PreflightFile(pytest.File):
    """A preflight file (``kind: Preflight``): one item that checks its stack."""

    def collect(self) -> Iterator[PreflightItem]:
        try:
            doc = load_preflight_file(self.path)
        except ScenarioError as exc:
            raise self.CollectError("invalid preflight file:\n" + str(exc)) from None
        yield PreflightItem.from_parent(self, name=f"preflight {doc.stack}", stack=doc.stack)


class PreflightFailed(Exception):
    """Raised by a preflight item that did not pass; carries its journal."""

    def __init__(self, journal: Journal) -> None:
        super().__init__(journal.reason)
        self.journal = journal


class PreflightItem(pytest.Item):
    def __init__(self, *, stack: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stack = stack

    def runtest(self) -> None:
        # Start-up time: every pytest session loads this plugin; the preflight loads on use.
        from faultday.preflight.runner import PreflightOptions, run_preflight  # noqa: PLC0415

        opt = self.config.getoption
        # A profile path is taken from the file's folder, a name from the invocation's.
        ref = self.stack
        if "/" in ref or ref.endswith((".yaml", ".yml")):
            ref = str((self.path.parent / ref).resolve())
        outcome = run_preflight(
            PreflightOptions(
                profile=ref,
                base_dir=self.config.invocation_params.dir,
                report_dir=Path(opt("faultday_report_dir")),
                policy=opt("faultday_policy"),
                config=self.path,
            )
        )
        self.stash[REPORT_KEY] = outcome.run_dir
        self.user_properties.append(("faultday_verdict", str(outcome.journal.verdict)))
        self.user_properties.append(("faultday_run_dir", str(outcome.run_dir)))
        if not outcome.passed:
            raise PreflightFailed(outcome.journal)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, PreflightFailed):
            return _describe_failure(excinfo.value.journal)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"preflight: {self.stack}"


class ScenarioFile(pytest.File):
    """A scenario file: one item, or a collection error naming file:line."""

    def collect(self) -> Iterator[ScenarioItem]:
        # Imported here, not at the top: every pytest session loads this plugin.
        from faultday.session import target_resolver  # noqa: PLC0415

        try:
            loaded = load_scenario(
                self.path, resolve_targets=target_resolver(self.config.invocation_params.dir)
            )
        except ScenarioError as exc:
            raise self.CollectError("invalid scenario:\n" + str(exc)) from None
        item = ScenarioItem.from_parent(self, name=loaded.scenario.name, loaded=loaded)
        for tag in loaded.scenario.metadata.tags:
            marker = tag.replace("-", "_")
            self.config.addinivalue_line("markers", f"{marker}: scenarios tagged {tag}")
            item.add_marker(marker)
        yield item


class ScenarioFailed(Exception):
    """Raised by a scenario item whose run did not pass; carries its journal."""

    def __init__(self, journal: Journal, note: str = "") -> None:
        super().__init__(journal.reason)
        self.journal = journal
        self.note = note


class ScenarioItem(pytest.Item):
    def __init__(self, *, loaded: LoadedScenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.loaded = loaded

    def runtest(self) -> None:
        # Start-up time: every pytest session loads this plugin; the engine loads on use.
        from faultday.session import Overrides, Settings, run_scenario  # noqa: PLC0415

        opt = self.config.getoption
        events = RunEvents()
        events.run_started.add_listener(self._run_started)
        events.scenario_ended.add_listener(self._scenario_ended)
        outcome = run_scenario(
            self.loaded,
            settings=Settings(
                report_dir=Path(opt("faultday_report_dir")),
                base_dir=self.config.invocation_params.dir,
                time_scale=opt("faultday_time_scale"),
            ),
            overrides=Overrides(stack=opt("faultday_stack"), policy=opt("faultday_policy")),
            pool=_pool(self.config),
            events=events,
        )
        journal = outcome.journal
        naive = outcome.scenario.metadata.naive
        if naive is not None and outcome.scenario.spec.policy == "naive":
            raise ScenarioFailed(journal, note=_naive_note(journal, naive.fails, naive.because))
        if journal.verdict != RunVerdict.PASSED:
            raise ScenarioFailed(journal)

    def _run_started(self, ev: RunStarted) -> None:
        # Known from the start: a report folder to look in even if the run goes wrong.
        self.stash[REPORT_KEY] = ev.run_dir
        self.user_properties.append(("faultday_run_dir", str(ev.run_dir)))

    def _scenario_ended(self, ev: ScenarioEnded) -> None:
        self.user_properties.append(("faultday_verdict", str(ev.journal.verdict)))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            text = _describe_failure(excinfo.value.journal)
            return f"{excinfo.value.note}\n{text}" if excinfo.value.note else text
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"scenario: {self.name}"


def _naive_note(j: Journal, fails: tuple[str, ...], because: str) -> str:
    """Under the naive policy such a scenario must fail, and for its stated reason."""
    failed = {c.check for c in j.checks if c.verdict != "passed"}
    missing = [c for c in fails if c not in failed]
    if j.verdict == RunVerdict.PASSED:
        return f"naive policy: expected to fail ({because}), but every check passed"
    if missing:
        return f"naive policy: failed, but not for the stated reason: {', '.join(missing)} held"
    return f"naive policy: failed as expected — {because} (caught by {', '.join(fails)})"


def _describe_failure(j: Journal) -> str:
    lines = [f"{j.verdict.upper()}: {j.reason}"]
    for c in j.checks:
        if c.verdict == "passed":
            continue
        text = f"  ✗ {c.window}: {c.label}"
        if c.expected:
            text += f" expected {c.expected}"
        if c.observed:
            text += f", observed {c.observed}"
        text += f" (n={c.n})"
        if c.message:
            text += f" — {c.message}"
        lines.append(text)
    lines += [f"  error: {e}" for e in j.errors]
    report = j.artifacts.get("report.html") or j.artifacts.get("report.md") or "journal.json"
    lines.append(f"report: {Path(j.run_dir) / report}")
    return "\n".join(lines)


# ---- fixtures for scenarios written in Python ------------------------------------


class SessionStack:
    """One stack for the whole session; components a test left unhealthy are restarted.

    ``stack`` is the driver itself (everything a ``StackDriver`` offers); ``target`` and
    ``endpoints`` are here because tests ask for them most.
    """

    def __init__(self, stack: StackDriver, run_dir: Path, ledger: Ledger) -> None:
        self.stack = stack
        self.run_dir = run_dir
        self.ledger = ledger

    def target(self, name: str) -> Target:
        """A component or an edge of the stack, as an injector gets it."""
        return self.stack.target(name)

    def endpoints(self) -> dict[str, str]:
        """Component → base URL (or host:port)."""
        return self.stack.endpoints()

    def heal(self) -> list[str]:
        """Restart every component whose process is gone; return their names."""
        healed = []
        info = self.stack.describe()
        for comp in info.components:
            if comp.health in ("exited", "stopped"):
                self.stack.restart(comp.name, timeout=60)
                healed.append(comp.name)
        return healed


@pytest.fixture(scope="session")
def faultday_stack(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SessionStack]:
    """The stack named by ``--faultday-stack`` (default ``local``), up for the whole session.

    Its folder (logs, ledger) is one of pytest's temporary folders, which pytest keeps
    for the last few sessions and then removes: nothing piles up in /tmp.
    """
    # Start-up time: every pytest session loads this plugin; the engine loads on use.
    from faultday.stack.stack import Stack  # noqa: PLC0415

    base = pytestconfig.invocation_params.dir
    name = pytestconfig.getoption("faultday_stack") or "local"
    run_dir = tmp_path_factory.mktemp("faultday-stack")
    ledger = Ledger.in_dir(run_dir)
    stack = Stack(load_profile(name, base_dir=base), run_dir=run_dir, ledger=ledger, policy=None)
    stack.up()
    try:
        yield SessionStack(stack, run_dir, ledger)
    finally:
        stack.down()


class _Ctx:
    """FaultContext over the session stack."""

    def __init__(self, stack: SessionStack) -> None:
        self.run_dir = stack.run_dir
        self.live = True
        self.stack: StackDriver = stack.stack

    def target(self, name: str) -> Target:
        return self.stack.target(name)

    def restart(self, component: str, *, timeout: float) -> None:
        self.stack.restart(component, timeout=timeout)


#: ``inject(injector, target=..., name=..., **params)``: a context manager around one fault.
Inject = Callable[..., AbstractContextManager[Revert]]


@pytest.fixture
def inject(faultday_stack: SessionStack) -> Iterator[Inject]:
    """``with inject("process_pause", target="ticker"):`` — a fault for the block, always reverted.

    The revert is in the session's ledger before the fault acts, like in a run;
    components the test left down are restarted after it.
    """

    registry = injector_registry()

    @contextlib.contextmanager
    def _inject(
        injector: str, *, target: str, name: str = "python", **params: Any
    ) -> Iterator[Revert]:
        inj = registry.get(injector)()
        parsed = inj.parse(params)
        ctx = _Ctx(faultday_stack)
        revert = inj.prepare(ctx, ctx.target(target), parsed, fault=name)
        faultday_stack.ledger.add_revert(revert)
        try:
            inj.inject(ctx, ctx.target(target), parsed, revert)
            yield revert
        finally:
            try:
                inj.revert(ctx, revert)
            except Exception as exc:
                faultday_stack.ledger.revert_done(revert, ok=False, error=str(exc))
                raise
            faultday_stack.ledger.revert_done(revert, ok=True)

    yield _inject
    faultday_stack.heal()

"""Load scenarios: every problem in one pass, each with ``file:line:col`` and its YAML path."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, JsonValue, ValidationError

from faultday.checks.base import AnyCheck, check_registry
from faultday.checks.soak import Drift, DriftParams
from faultday.core.durations import parse_duration
from faultday.core.plugins import Registry, did_you_mean
from faultday.core.scenario import MAX_CHECKS, MAX_FAULTS, MAX_PATH, CheckSpec, Fault, Scenario
from faultday.core.targets import TargetKind
from faultday.core.yamlpos import Document, PathKey, parse_file, printable, validation_problems
from faultday.errors import FaultdayError, ScenarioError
from faultday.injectors.base import AnyInjector, injector_registry
from faultday.scenario.drift import DriftItem, drift_findings
from faultday_wire.problems import Problem

SUFFIX = ".scenario.yaml"
EDGE_ARROW = "->"

# target name → its kind, used to check that an injector can act on it.
TargetTable = dict[str, TargetKind]
TargetResolver = Callable[[str], TargetTable]
PluginT = TypeVar("PluginT")


@dataclass(frozen=True, slots=True)
class LoadedScenario:
    scenario: Scenario
    file: Path
    document: Document


def stack_ref(stack: str, scenario_file: Path) -> str:
    """A profile name as is; a relative profile path taken from the scenario's folder."""
    if "/" in stack or stack.endswith((".yaml", ".yml")):
        p = Path(stack)
        return str(p if p.is_absolute() else (scenario_file.parent / p).resolve())
    return stack


def find_scenarios(paths: Iterable[Path]) -> list[Path]:
    """Expand folders into their ``*.scenario.yaml`` files (recursively), sorted."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(p.rglob(f"*{SUFFIX}")))
        else:
            out.append(p)
    return out


@functools.cache
def _registries() -> tuple[Registry[AnyInjector], Registry[AnyCheck]]:
    # Reading the entry points takes some 13 ms a registry: once a process, not once a file.
    return injector_registry(), check_registry()


class _Validator:
    def __init__(self, doc: Document, resolve_targets: TargetResolver | None) -> None:
        self.doc = doc
        self.resolve_targets = resolve_targets
        self.problems: list[Problem] = []
        self.injectors, self.checks = _registries()
        self.one_shot: set[str] = set()
        self.fault_names: set[str] = set()
        self._target_cache: dict[str, TargetTable | None] = {}
        self.drift: list[DriftItem] = []

    def add(self, path: PathKey, message: str, *, key: bool = False) -> None:
        self.problems.append(self.doc.problem(path, message, key=key))

    def run(self) -> Scenario | None:
        data = self.doc.data
        if not isinstance(data, dict):
            self.add((), "a scenario is a mapping with apiVersion, kind, metadata and spec")
            return None
        scenario: Scenario | None = None
        try:
            scenario = Scenario.model_validate(data)
        except ValidationError as exc:
            self.problems.extend(validation_problems(self.doc, exc, model=Scenario))
        spec = data.get("spec")
        if isinstance(spec, dict):
            self._semantics(spec)
        return scenario

    # Semantic checks run item by item on the raw data, so that they add to the
    # structural errors instead of waiting for them to be fixed first.
    def _semantics(self, spec: dict[str, object]) -> None:
        duration = self._duration(spec)
        faults = self._faults(spec.get("faults"), duration, spec.get("stack"))
        self._load_target(spec)
        for section in ("steady_state", "expect", "abort"):
            items = spec.get(section)
            if not isinstance(items, list):
                continue
            if len(items) > MAX_CHECKS:
                continue  # reported by the whole-model pass; judging each would take long
            for i, raw in enumerate(items):
                self._check_item(("spec", section, i), raw, section, faults)
        if duration is not None and faults and spec.get("steady_state"):
            self._recovery_room(spec, faults, duration)
        targets = self._targets(spec.get("stack")) if self.drift else None
        findings = drift_findings(
            self.drift, spec=spec, duration=duration, faults=faults, targets=targets
        )
        for finding in findings:
            self.add(finding.path, finding.message)

    @staticmethod
    def _duration(spec: dict[str, object]) -> float | None:
        try:
            return parse_duration(spec["duration"]) if "duration" in spec else None
        except ValueError:
            return None

    def _targets(self, stack: object) -> TargetTable | None:
        if self.resolve_targets is None or not isinstance(stack, str):
            return None
        if not stack or len(stack) > MAX_PATH or "\0" in stack:
            return None  # not a name or a path; the model says so, and no file is opened
        if stack not in self._target_cache:
            self._target_cache[stack] = self._resolve(stack)
        return self._target_cache[stack]

    def _resolve(self, stack: str) -> TargetTable | None:
        assert self.resolve_targets is not None
        try:
            return self.resolve_targets(stack_ref(stack, Path(self.doc.file)))
        except ScenarioError as exc:
            for p in exc.problems:
                if _is_file(p.file):
                    self.problems.append(p)  # a problem inside the profile file itself
                elif p.message == "no such file":
                    self.add(("spec", "stack"), f"no stack profile at {printable(p.file)}")
                elif p.message.startswith(("not a regular file", "cannot read", "the file is")):
                    self.add(
                        ("spec", "stack"), f"the stack profile {printable(p.file)}: {p.message}"
                    )
                else:
                    self.add(("spec", "stack"), p.message)
        except FaultdayError as exc:
            self.add(("spec", "stack"), str(exc))
        except (OSError, ValueError) as exc:  # a name too long for the file system, a NUL
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            self.add(("spec", "stack"), f"no stack profile can be read there: {why}")
        return None

    def _faults(self, raw: object, duration: float | None, stack: object) -> dict[str, Fault]:
        faults: dict[str, Fault] = {}
        one_shot_names = self.one_shot
        if not isinstance(raw, list):
            return faults
        if len(raw) > MAX_FAULTS:  # reported by the whole-model pass
            self.fault_names.update(
                item["name"]
                for item in raw
                if isinstance(item, dict) and isinstance(item.get("name"), str)
            )
            return faults
        targets = self._targets(stack) if raw else None
        for i, item in enumerate(raw):
            path: PathKey = ("spec", "faults", i)
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                self.fault_names.add(item["name"])  # so references to it don't cascade
            try:
                fault = Fault.model_validate(item)
            except ValidationError:
                continue  # already reported by the whole-model pass
            if fault.duration is None:
                one_shot_names.add(fault.name)
            if fault.name in faults:
                self.add((*path, "name"), f"duplicate fault name {fault.name!r}")
            faults[fault.name] = fault
            if duration is not None and fault.end > duration:
                self.add(
                    (*path, "duration" if fault.duration else "at"),
                    f"the fault window ends at {fault.end:g}s, after the scenario's "
                    f"duration ({duration:g}s)",
                )
            injector = self._plugin(self.injectors, fault.inject, (*path, "inject"))
            if injector is None:
                continue
            self._params(injector, fault.with_, (*path, "with"))
            if targets is not None:
                self._target(fault, injector, targets, path)
        return faults

    def _load_target(self, spec: dict[str, object]) -> None:
        load = spec.get("load")
        if not isinstance(load, dict) or load.get("workload", "chat") == "none":
            return
        target = load.get("target", "agent")
        table = self._targets(spec.get("stack")) if isinstance(target, str) else None
        if table is None or target in table:
            return
        components = [n for n, k in table.items() if k == TargetKind.COMPONENT]
        where: PathKey = ("spec", "load", "target") if "target" in load else ("spec", "load")
        self.add(
            where,
            f"the load goes to {target!r}, which the stack does not have"
            f"{did_you_mean(str(target), components)}",
        )

    def _plugin(self, reg: Registry[PluginT], name: str, path: PathKey) -> PluginT | None:
        if name not in reg:
            self.add(path, f"unknown {reg.kind} {name!r}{did_you_mean(name, reg.names())}")
            return None
        try:
            return reg.get(name)()
        except FaultdayError as exc:
            self.add(path, str(exc))
            return None

    def _params(
        self, plugin: AnyInjector | AnyCheck, raw: dict[str, JsonValue], path: PathKey
    ) -> BaseModel | None:
        try:
            parsed: BaseModel = plugin.parse(raw)
        except ValidationError as exc:
            for p in validation_problems(self.doc, exc, prefix=path, model=type(plugin).Params):
                if p.message == "unknown key":
                    key = p.path.rsplit(".", 1)[-1]
                    fields = list(type(plugin).Params.model_fields)
                    hint = f"unknown key{did_you_mean(key, fields)}"
                    self.problems.append(Problem(p.file, p.line, p.col, p.path, hint))
                    continue
                self.problems.append(p)
            return None
        return parsed

    def _target(
        self, fault: Fault, injector: AnyInjector, targets: TargetTable, path: PathKey
    ) -> None:
        kind = targets.get(fault.target)
        if kind is None:
            self.add(
                (*path, "target"),
                f"unknown target {fault.target!r}{did_you_mean(fault.target, list(targets))}",
            )
            return
        if kind not in type(injector).target_kinds:
            wanted = " or ".join(sorted(type(injector).target_kinds))
            example = (
                "an edge such as agent->qdrant"
                if TargetKind.EDGE in type(injector).target_kinds
                else "a component"
            )
            self.add(
                (*path, "target"),
                f"{fault.inject} acts on a {wanted}, but {fault.target!r} is a {kind}; "
                f"give {example}",
            )

    def _check_item(
        self, path: PathKey, raw: object, section: str, faults: dict[str, Fault]
    ) -> None:
        try:
            spec = CheckSpec.model_validate(raw)
        except ValidationError:
            return
        for key in ("during", "after"):
            ref = getattr(spec, key)
            if ref and ref not in faults and ref not in self.fault_names:
                self.add((*path, key), f"no fault named {ref!r}{did_you_mean(ref, list(faults))}")
            elif key == "during" and ref in self.one_shot:
                self.add(
                    (*path, key), f"fault {ref!r} has no duration, so no window; use after: {ref}"
                )
        if section == "abort" and (spec.during or spec.after):
            self.add(path, "abort conditions are watched for the whole run; remove during/after")
        if section != "abort" and spec.for_ is not None:
            self.add((*path, "for"), "'for' belongs to abort conditions only")
        check = self._plugin(self.checks, spec.check, (*path, "check"))
        params = self._params(check, spec.params, path) if check is not None else None
        if isinstance(check, Drift):  # its target and series are judged even if params fail
            self.drift.append(
                DriftItem(path, spec, params if isinstance(params, DriftParams) else None)
            )

    def _recovery_room(
        self, spec: dict[str, object], faults: dict[str, Fault], duration: float
    ) -> None:
        try:
            recovery = parse_duration(spec.get("recovery", "10s"))
        except ValueError:
            return
        last = max(f.end for f in faults.values())
        if last + recovery >= duration:
            self.add(
                ("spec", "duration"),
                f"no time is left to check the steady state again: the last fault ends at "
                f"{last:g}s and recovery takes {recovery:g}s, but the run lasts {duration:g}s",
            )


def load_scenario(path: Path, *, resolve_targets: TargetResolver | None = None) -> LoadedScenario:
    """Parse and validate one scenario file; raise ScenarioError listing every problem."""
    doc = parse_file(path)
    v = _Validator(doc, resolve_targets)
    scenario = v.run()
    problems = _unique(v.problems)
    if problems or scenario is None:
        raise ScenarioError(problems or [doc.problem((), "invalid scenario")])
    return LoadedScenario(scenario=scenario, file=path, document=doc)


def _is_file(name: str) -> bool:
    try:
        return Path(name).is_file()
    except (OSError, ValueError):
        return False


def _unique(problems: list[Problem]) -> list[Problem]:
    seen: set[tuple[int, int, str]] = set()
    out = []
    for p in sorted(problems, key=lambda p: (p.line, p.col)):
        k = (p.line, p.col, p.message)
        if k not in seen:
            seen.add(k)
            out.append(p)
    return out


def parse_params(plugin: AnyInjector | AnyCheck, raw: dict[str, JsonValue]) -> BaseModel:
    """Parse already-validated params (the loader checked them) for the engine."""
    params: BaseModel = plugin.parse(raw)
    return params

"""The plan of a run: windows, the fault schedule, and which check runs where.

Computed from the scenario alone, so ``--dry-run`` shows exactly what a real
run would do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from faultday.core.scenario import CheckSpec, Scenario
from faultday.core.vocab import Phase, Section
from faultday.core.windows import Window, WindowKind


@dataclass(frozen=True, slots=True)
class Plan:
    scenario: Scenario
    time_scale: float
    windows: tuple[Window, ...]

    def schedule(self) -> list[tuple[float, str, str]]:
        """(scenario time, "inject"|"revert", fault name), in order; reverts first on ties."""
        items: list[tuple[float, int, str, str]] = []
        for f in self.scenario.spec.faults:
            items.append((f.at, 1, "inject", f.name))
            if f.duration is not None:
                items.append((f.end, 0, "revert", f.name))
        return [(t, action, name) for t, _, action, name in sorted(items)]

    def phase_at(self, t: float) -> Phase:
        spec = self.scenario.spec
        if not spec.faults:
            return Phase.STEADY
        first = min(f.at for f in spec.faults)
        last = max(f.end for f in spec.faults)
        if t < first:
            return Phase.BASELINE
        if t < last:
            return Phase.FAULTS
        if t < last + spec.recovery:
            return Phase.RECOVERY
        return Phase.STEADY

    def window(self, kind: WindowKind, fault: str = "") -> Window:
        for w in self.windows:
            if w.kind == kind and w.fault == fault:
                return w
        raise KeyError((kind, fault))

    def evaluations(self, scenario: Scenario) -> Iterator[tuple[Section, CheckSpec, Window]]:
        """Every (section, check, window) evaluated after the timeline."""
        spec = scenario.spec
        steady = (
            [self.window(WindowKind.BASELINE), self.window(WindowKind.RECOVERED)]
            if spec.faults
            else [self.window(WindowKind.RUN)]
        )
        for check in spec.steady_state:
            for w in steady:
                yield Section.STEADY_STATE, check, w
        for check in spec.expect:
            if check.during:
                yield Section.EXPECT, check, self.window(WindowKind.FAULT, check.during)
            elif check.after:
                yield Section.EXPECT, check, self.window(WindowKind.AFTER, check.after)
            else:
                yield Section.EXPECT, check, self.window(WindowKind.RUN)


def make_plan(scenario: Scenario, *, time_scale: float) -> Plan:
    spec = scenario.spec
    windows = [Window(WindowKind.RUN, "whole run", 0.0, spec.duration)]
    if spec.faults:
        first = min(f.at for f in spec.faults)
        last = max(f.end for f in spec.faults)
        windows.append(Window(WindowKind.BASELINE, "baseline", 0.0, first))
        windows.append(
            Window(
                WindowKind.RECOVERED,
                "after recovery",
                min(spec.duration, last + spec.recovery),
                spec.duration,
            )
        )
        for f in spec.faults:
            windows.append(Window(WindowKind.FAULT, f"during {f.name}", f.at, f.end, fault=f.name))
            windows.append(
                Window(WindowKind.AFTER, f"after {f.name}", f.end, spec.duration, fault=f.name)
            )
    return Plan(scenario=scenario, time_scale=time_scale, windows=tuple(windows))

"""A soak's drift checks against the rest of the scenario: can each one measure anything?

A drift check's own fields are valid on their own (``checks.soak.DriftParams``); what
only the whole scenario can tell is checked here, at validate time:

* its ``target`` is a component of the stack profile;
* ``rss`` and ``fds`` are sampled only under ``load.shape: soak``;
* its window holds ``min_points`` points: the run (or the fault's window) is long
  enough for a slope, and ``load.sample_interval`` (or the check's ``interval``) is
  short enough to give them.

Each finding is a path in the scenario file and a message saying what would be valid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from faultday.checks.soak import PROCESS_SERIES, SAMPLED, DriftParams, DriftSeries
from faultday.core.durations import exact_seconds, format_duration, parse_duration
from faultday.core.plugins import did_you_mean
from faultday.core.scenario import MIN_SAMPLE_INTERVAL, CheckSpec, Fault, LoadShape
from faultday.core.targets import TargetKind
from faultday.core.yamlpos import PathKey

_FINEST = float(exact_seconds(MIN_SAMPLE_INTERVAL))


@dataclass(frozen=True, slots=True)
class DriftItem:
    """One drift check as the loader found it: where, its window, its parameters."""

    path: PathKey
    spec: CheckSpec
    params: DriftParams | None  # None when they are invalid (reported on their own)

    @property
    def target(self) -> str | None:
        target = self.spec.params.get("target")
        return target if isinstance(target, str) else None

    @property
    def series(self) -> DriftSeries | None:
        try:
            return DriftSeries(str(self.spec.params.get("series")))
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Finding:
    path: PathKey
    message: str
    need: float = 0.0  # seconds of window a check falls short for: the largest is reported


@dataclass(frozen=True, slots=True)
class _Run:
    """What the checks are judged against, as far as the file says it validly."""

    spec: Mapping[str, object]
    duration: float | None
    faults: Mapping[str, Fault]
    targets: Mapping[str, TargetKind] | None

    @property
    def load(self) -> Mapping[str, object]:
        load = self.spec.get("load")
        return load if isinstance(load, dict) else {}

    def sample_interval(self) -> float | None:
        try:
            return parse_duration(self.load.get("sample_interval", "1s"))
        except ValueError:
            return None  # the model says what is wrong with it


def drift_findings(
    items: list[DriftItem],
    *,
    spec: Mapping[str, object],
    duration: float | None,
    faults: Mapping[str, Fault],
    targets: Mapping[str, TargetKind] | None,
) -> list[Finding]:
    """Every way the drift checks of a scenario could never measure anything."""
    run = _Run(spec, duration, faults, targets)
    out: list[Finding] = []
    short: dict[PathKey, list[Finding]] = {}
    for item in items:
        out += _target(item, run)
        out += _sampler(item, run)
        for finding in _points(item, run):
            short.setdefault(finding.path, []).append(finding)
    # One finding per place to fix (the first check that falls short), not one per check.
    for path, found in short.items():
        more = len(found) - 1
        also = f" ({more} more drift check{'s' if more > 1 else ''} too)" if more else ""
        worst = max(found, key=lambda f: f.need)
        out.append(Finding(path, worst.message + also))
    return out


def _target(item: DriftItem, run: _Run) -> list[Finding]:
    target = item.target
    if target is None or run.targets is None:
        return []
    components = sorted(n for n, k in run.targets.items() if k == TargetKind.COMPONENT)
    if target in components:
        return []
    what = "an edge" if target in run.targets else "no component of the stack"
    return [
        Finding(
            (*item.path, "target"),
            f"{target!r} is {what}; a drift check's target is a component"
            f"{did_you_mean(target, components)}",
        )
    ]


def _sampler(item: DriftItem, run: _Run) -> list[Finding]:
    shape = run.load.get("shape", LoadShape.CONSTANT.value)
    if item.series not in PROCESS_SERIES or shape == LoadShape.SOAK.value:
        return []
    return [
        Finding(
            (*item.path, "series"),
            f"series {item.series} is sampled only when the load's shape is soak "
            f"(the process sampler), and this load's is {shape}; set spec.load.shape: soak",
        )
    ]


def _window(item: DriftItem, run: _Run) -> tuple[float, str, PathKey] | None:
    """The window's length, what it is called, and where in the file it is set."""
    if run.duration is None:
        return None
    for key in ("during", "after"):
        name = getattr(item.spec, key)
        if name is None:
            continue
        fault = run.faults.get(name)
        if fault is None:
            return None  # an unknown fault: already reported
        length = (fault.duration or 0.0) if key == "during" else run.duration - fault.end
        return max(length, 0.0), f"the window {key} fault {name!r}", (*item.path, key)
    return run.duration, "the run", ("spec", "duration")


def _points(item: DriftItem, run: _Run) -> list[Finding]:
    p = item.params
    if p is None:
        return []
    sample_interval = run.sample_interval()
    window = _window(item, run)
    if sample_interval is None or window is None:
        return []
    length, called, where = window
    have, need = p.points_in(length, sample_interval), p.min_points
    if have >= need:
        return []
    sampled = p.series in SAMPLED
    step = p.step(sample_interval)
    written = _as_written(run.load.get("sample_interval") if sampled else _raw(item, "interval"))
    step_text = written or format_duration(step)
    what = "sample" if sampled else f"full {step_text} interval"
    label = f"the drift check of {p.series}" + (f" of {p.target}" if p.target else "")
    counted = (
        f"{called} ({format_duration(length)}) holds {'at most ' if sampled else ''}"
        f"{have} {what}{'s' if have != 1 else ''}"
        f"{f' at one every {step_text}' if sampled else ''}; {label} at "
        f"{_dotted(item.path)} needs at least {need} (min_points)"
    )
    window_word = "run" if called == "the run" else "window"
    needed = p.length_for(need, sample_interval)
    longer = f"a {window_word} of at least {format_duration(needed)}"
    gaps = need - 1 if sampled else need
    finest = math.floor(length / gaps * 1000) / 1000  # the longest step that still fits
    if finest < _FINEST:  # no step short enough: the window itself is too short for a slope
        too_short = f"{format_duration(length)} is too short for a slope"
        return [Finding(where, f"{too_short}: {counted}; it takes {longer}", needed)]
    knob, step_path = _step_key(item, run)
    # A step longer than the window is the mistake itself; a longer run would be no fix.
    otherwise = f", or {longer}" if step <= length else ""
    fix = f"{knob} of at most {format_duration(finest)}{otherwise}"
    return [Finding(step_path, f"{counted}: {fix}", -finest)]


def _step_key(item: DriftItem, run: _Run) -> tuple[str, PathKey]:
    if item.series not in SAMPLED:
        raw_has = "interval" in item.spec.params
        return "an interval", (*item.path, "interval") if raw_has else item.path
    if "sample_interval" in run.load:
        return "a sample_interval", ("spec", "load", "sample_interval")
    return "a load.sample_interval", ("spec", "load") if "load" in run.spec else item.path


def _raw(item: DriftItem, key: str) -> object:
    return item.spec.params.get(key)


def _as_written(value: object) -> str | None:
    """A duration as the file writes it (``99999999h``, not ``5999999940m``)."""
    return value.strip() if isinstance(value, str) else None


def _dotted(path: PathKey) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out

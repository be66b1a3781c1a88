"""Read ``timeseries.csv`` (long format ``t,series,labels,value``) back for charts and impact."""

from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

CSV_NAME = "timeseries.csv"


@dataclass(frozen=True, slots=True)
class Series:
    """One named series (with its labels) as parallel tuples of times and values."""

    name: str
    labels: tuple[tuple[str, str], ...]
    t: tuple[float, ...]
    v: tuple[float, ...]

    def label(self, key: str, default: str = "") -> str:
        return dict(self.labels).get(key, default)


@dataclass(frozen=True, slots=True)
class SeriesSet:
    """Every series of a run; empty when the run wrote no time series."""

    series: tuple[Series, ...] = ()
    source: str = ""
    problems: tuple[str, ...] = field(default=())

    def __bool__(self) -> bool:
        return bool(self.series)

    def get(self, name: str, **labels: str) -> Series | None:
        want = tuple(sorted(labels.items()))
        for s in self.series:
            if s.name == name and s.labels == want:
                return s
        return None

    def all(self, name: str) -> list[Series]:
        return [s for s in self.series if s.name == name]

    def interval(self) -> float:
        """The spacing of the load series (smallest positive step), 1 s when unknown."""
        s = self.get("load_requests") or (self.series[0] if self.series else None)
        if s is None or len(s.t) < 2:
            return 1.0
        steps = [b - a for a, b in zip(s.t, s.t[1:], strict=False) if b > a]
        return min(steps) if steps else 1.0


def _labels(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for part in text.split(";"):
        if "=" in part:
            k, _, v = part.partition("=")
            pairs.append((k, v))
    return tuple(sorted(pairs))


def read_series(run_dir: Path) -> SeriesSet:
    """Load ``timeseries.csv`` from a run folder; an absent file gives an empty set."""
    path = run_dir / CSV_NAME
    if not path.is_file():
        return SeriesSet()
    data: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
    problems: list[str] = []
    with path.open(newline="", encoding="utf-8") as fh:
        for lineno, row in enumerate(csv.DictReader(fh), start=2):
            try:
                t, value = float(row["t"]), float(row["value"])
                key = (row["series"], _labels(row.get("labels") or ""))
            except (KeyError, TypeError, ValueError) as exc:
                problems.append(f"{CSV_NAME}:{lineno}: {exc}")
                continue
            if math.isfinite(t) and math.isfinite(value):
                data.setdefault(key, []).append((t, value))
    if problems:
        log.warning("%d unreadable rows in %s (first: %s)", len(problems), path, problems[0])
    series = tuple(
        Series(name, labels, tuple(p[0] for p in pts), tuple(p[1] for p in pts))
        for (name, labels), pts in sorted(data.items())
        for pts in [sorted(pts)]
    )
    return SeriesSet(series=series, source=str(path), problems=tuple(problems[:20]))

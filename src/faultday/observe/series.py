"""Per-interval figures computed exactly from raw request records, and ``timeseries.csv``."""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from faultday.core.protocols import RunView
from faultday.core.records import RequestRecord, Sample, bins, metric_values, percentile
from faultday.core.vocab import EventKind

CSV_NAME = "timeseries.csv"
PREFIX = "load_"


def derived(
    records: Sequence[RequestRecord], *, interval: float, start: float, end: float
) -> list[Sample]:
    """rps, errors, error rate, e2e/TTFT/ITL p50 and p99, tokens/s, degraded share (by reason)."""
    out: list[Sample] = []
    for b in bins(records, interval=interval, start=start, end=end):
        t, rs = b.start, b.records
        n = len(rs)
        errors = sum(1 for r in rs if not r.ok)
        figures: dict[str, float] = {
            "rps": n / interval,
            "requests": float(n),
            "errors": float(errors),
            "error_rate": errors / n if n else 0.0,
            "tokens_per_s": sum(r.tokens for r in rs) / interval,
            "degraded_share": sum(1 for r in rs if r.degraded) / n if n else 0.0,
        }
        for metric in ("e2e", "ttft", "itl"):
            values = metric_values(rs, metric)
            if values:
                figures[f"{metric}_p50"] = percentile(values, 50)
                figures[f"{metric}_p99"] = percentile(values, 99)
        out += [Sample(t, PREFIX + k, v) for k, v in figures.items()]
        reasons = Counter(reason for r in rs for reason in set(r.reasons))
        out += [
            Sample(t, PREFIX + "degraded_share", c / n, (("reason", reason),))
            for reason, c in sorted(reasons.items())
        ]
    return out


def write_csv(path: Path, samples: Iterable[Sample]) -> int:
    """Long format: ``t,series,labels,value``; labels as ``k=v;k=v``. Returns the row count."""
    rows = 0
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "series", "labels", "value"])
        for s in sorted(samples, key=lambda s: (s.t, s.name, s.labels)):
            w.writerow(
                [f"{s.t:.4f}", s.name, ";".join(f"{k}={v}" for k, v in s.labels), repr(s.value)]
            )
            rows += 1
    return rows


class TimeSeriesWriter:
    """At stop: derive the per-interval figures from every record and write timeseries.csv."""

    name = "timeseries"

    def __init__(self, *, interval: float) -> None:
        self.interval = interval
        self._run: RunView | None = None

    def start(self, run: RunView) -> None:
        self._run = run

    def stop(self) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        obs = run.observations
        records = list(obs.requests)
        first = min((r.t for r in records), default=0.0)
        start = math.floor(min(first, 0.0) / self.interval) * self.interval
        end = max(run.scenario.spec.duration, max((r.t for r in records), default=0.0) + 1e-9)
        figures = derived(records, interval=self.interval, start=start, end=end)
        obs.add_samples(figures)
        path = run.run_dir / CSV_NAME
        rows = write_csv(path, list(obs.samples))
        run.event(EventKind.TIMESERIES_WRITTEN, f"{rows} rows", file=CSV_NAME, rows=rows)

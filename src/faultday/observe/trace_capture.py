"""Keep the run's spans: from the stack's trace collector into the run folder (``traces.db``).

The collector lives as long as the stack (a shared stack serves several runs), so a run
notes when it began and the collector's counters, and at its end waits for the
components' last batches, copies the spans of its own time range into ``traces.db``,
and takes the counters again: what the cap dropped and the bodies refused during the
run go into the report. With ``traces.forward`` the run's spans are also sent to the
user's own OTLP/HTTP collectors (Jaeger, Tempo, an OpenTelemetry Collector).
docs/traces.md describes it; the analysis of the copied spans is ``trace_analysis``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from faultday.core.otlp import CONTENT_PROTOBUF, encode
from faultday.core.protocols import RunView, TraceHost
from faultday.core.spans import Span
from faultday.core.spanstore import RUN_TRACES_DB, CollectorAddress, SpanStore, SpanStoreError
from faultday.core.vocab import EventKind

log = logging.getLogger(__name__)

# A run's spans start at most this long before the participant starts (the warm-up's
# first requests race it); and the copy's end is this long after its stop.
MARGIN_S = 2.0
# The components' batch processors export every 0.5 s (OTEL_BSP_SCHEDULE_DELAY, set by
# the profile): wait until the collector took nothing new for this long, at most FLUSH_MAX_S.
QUIET_S = 1.2
FLUSH_MAX_S = 6.0
STATS_TIMEOUT_S = 2.0
FORWARD_BATCH = 1_000  # spans per export body to a user's collector
FORWARD_TIMEOUT_S = 5.0
FORWARD_BUDGET_S = 30.0  # all forwarding of one run; what is left is counted, not sent
_REJECTED = ("rejected_400", "rejected_413", "rejected_415")


@dataclass(frozen=True, slots=True)
class Captured:
    """What a run kept of its traces (the analysis reads the spans back from ``db``)."""

    db: Path
    spans: int
    dropped: int  # by the collector's cap during the run, and past the run's max_spans
    rejected: int  # export bodies it refused during the run
    max_spans: int


class TraceCapture:
    """A participant: notes the collector at the start, copies the run's spans at the end."""

    name = "traces"

    def __init__(self, *, max_spans: int, forward: Sequence[str] = ()) -> None:
        self.max_spans = max_spans
        self.forward = tuple(forward)
        self.captured: Captured | None = None
        self._run: RunView | None = None
        self._address: CollectorAddress | None = None
        self._start_ns = 0
        self._stats0: dict[str, int] = {}

    def start(self, run: RunView) -> None:
        self._run = run
        stack = run.stack
        self._address = stack.collector() if isinstance(stack, TraceHost) else None
        if self._address is None:
            return
        self._start_ns = time.time_ns() - int(MARGIN_S * 1e9)
        self._stats0 = _stats(self._address.stats_url)

    def stop(self) -> None:
        address, run = self._address, self._run
        self._address = None  # idempotent: a second stop does nothing
        if address is None or run is None:
            return
        stats1 = _flush(address.stats_url)
        end_ns = time.time_ns() + int(MARGIN_S * 1e9)
        db = run.run_dir / RUN_TRACES_DB
        try:
            with SpanStore(address.db_path) as store:
                n = store.copy_range(db, self._start_ns, end_ns, limit=self.max_spans)
                over = store.count(self._start_ns, end_ns) - n  # past traces.max_spans
        except SpanStoreError as exc:
            run.event(EventKind.TRACES_COLLECTED, f"no spans kept: {exc}", spans=0)
            return
        dropped = _delta(self._stats0, stats1, ("spans_dropped",)) + max(0, over)
        rejected = _delta(self._stats0, stats1, _REJECTED)
        self.captured = Captured(db, n, dropped, rejected, self.max_spans)
        forwarded = self._forward(db) if self.forward and n else {}
        run.event(
            EventKind.TRACES_COLLECTED,
            f"{n} spans kept in {RUN_TRACES_DB}"
            + (f"; {dropped} dropped by the collector's cap" if dropped else "")
            + (f"; {rejected} export bodies refused" if rejected else ""),
            spans=n,
            dropped=dropped,
            rejected=rejected,
            forwarded=forwarded,
        )

    def _forward(self, db: Path) -> dict[str, int]:
        """Send the run's spans to each ``traces.forward`` URL; spans accepted per URL."""
        with SpanStore(db) as store:
            spans = store.read(limit=self.max_spans)
        sent: dict[str, int] = dict.fromkeys(self.forward, 0)
        deadline = time.monotonic() + FORWARD_BUDGET_S
        with httpx.Client(timeout=FORWARD_TIMEOUT_S) as http:
            for url in self.forward:
                for body, count in _bodies(spans):
                    if time.monotonic() > deadline:
                        break
                    try:
                        resp = http.post(url, content=body,
                                         headers={"Content-Type": CONTENT_PROTOBUF})  # fmt: skip
                    except httpx.HTTPError as exc:
                        log.warning("forwarding spans to %s: %s", url, exc)
                        break
                    if resp.status_code >= 300:
                        log.warning("forwarding spans to %s: HTTP %s", url, resp.status_code)
                        break
                    sent[url] += count
        return sent


def _bodies(spans: Sequence[Span]) -> list[tuple[bytes, int]]:
    """OTLP export bodies of at most FORWARD_BATCH spans, one service (resource) each."""
    by_service: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_service[span.service].append(span)
    out = []
    for service, group in by_service.items():
        for i in range(0, len(group), FORWARD_BATCH):
            chunk = group[i : i + FORWARD_BATCH]
            out.append((encode(chunk, service), len(chunk)))
    return out


def _stats(url: str) -> dict[str, int]:
    if not url:
        return {}
    with contextlib.suppress(httpx.HTTPError, ValueError):
        doc = httpx.get(url, timeout=STATS_TIMEOUT_S).json()
        if isinstance(doc, dict):
            return {k: v for k, v in doc.items() if isinstance(v, int)}
    return {}


def _flush(url: str) -> dict[str, int]:
    """Wait until the collector has taken nothing new for QUIET_S (at most FLUSH_MAX_S)."""
    deadline = time.monotonic() + FLUSH_MAX_S
    last = _stats(url)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = _stats(url)
        if now.get("spans_accepted") != last.get("spans_accepted"):
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_S:
            return now
    return last


def _delta(before: dict[str, int], after: dict[str, int], keys: Sequence[str]) -> int:
    return max(0, sum(after.get(k, 0) - before.get(k, 0) for k in keys))

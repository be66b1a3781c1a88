"""Spans on disk: one SQLite file (WAL), bounded (docs/traces.md).

The trace collector writes here (``<work_dir>/spans.db``); a run copies its own time range
into its folder (:meth:`SpanStore.copy_range` → ``traces.db``) and the analysis reads
it back. SQLite in WAL mode lets a second process read the spans and the counters
(:func:`read_counters`) while the collector writes. The store keeps at most
``max_spans`` spans; what arrives beyond that is refused and counted in ``dropped``,
which is kept in the file too, so a reader knows the traces are incomplete.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

from faultday.core.spans import AttrValue, Span, SpanKind, SpanStatus
from faultday.errors import FaultdayError

__all__ = [
    "COLLECTOR_HEALTH_PATH",
    "COLLECTOR_STATS_PATH",
    "DEFAULT_MAX_SPANS",
    "RUN_TRACES_DB",
    "SPANS_DB",
    "CollectorAddress",
    "SpanCounters",
    "SpanStore",
    "SpanStoreError",
    "read_counters",
]

SPANS_DB: Final = "spans.db"  # the collector component's store, in its work dir
RUN_TRACES_DB: Final = "traces.db"  # a run's own copy of its time range, in the run folder
COLLECTOR_STATS_PATH: Final = "/stats"
COLLECTOR_HEALTH_PATH: Final = "/health"
DEFAULT_MAX_SPANS: Final = 200_000
DEFAULT_READ_LIMIT: Final = 100_000
_BUSY_TIMEOUT_S: Final = 5.0

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    service TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    status TEXT NOT NULL,
    status_message TEXT NOT NULL,
    attributes TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS spans_trace ON spans (trace_id);
CREATE INDEX IF NOT EXISTS spans_start ON spans (start_ns);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('stored', 0), ('dropped', 0);
"""
_COLUMNS: Final = (
    "trace_id, span_id, parent_id, service, name, kind, start_ns, end_ns,"
    " status, status_message, attributes"
)
# Every query below is built from these constants and _where's fixed fragments only; every
# value is a bound parameter (hence the S608 exceptions).
_COPY: Final = f"INSERT INTO dest.spans ({_COLUMNS}) SELECT {_COLUMNS} FROM main.spans"  # noqa: S608
_Row = tuple[str, str, str, str, str, str, int, int, str, str, str]


@dataclass(frozen=True, slots=True)
class CollectorAddress:
    """Where a running stack's trace collector is: what a run needs to keep its spans.

    ``db_path`` is the collector's store (``<run_dir>/<collector>/spans.db``): open it with
    :class:`SpanStore` and ``copy_range`` the run's window into ``traces.db``.
    ``stats_url`` answers the collector's counters as JSON; ``otlp_url`` is what the
    components export to (the ``{otlp}`` template); both are "" while the stack is down.
    """

    component: str
    otlp_url: str
    stats_url: str
    db_path: Path


class SpanStoreError(FaultdayError):
    """The span store's file cannot be opened, read or written."""


@dataclass(frozen=True, slots=True)
class SpanCounters:
    stored: int  # spans in the store
    dropped: int  # spans refused because the store was full


class SpanStore:
    """A bounded span table in one SQLite file; safe to share between threads."""

    def __init__(self, path: Path, *, max_spans: int = DEFAULT_MAX_SPANS) -> None:
        if max_spans < 0:
            raise SpanStoreError(f"max_spans must be 0 or more, not {max_spans}")
        self.path = path
        self.max_spans = max_spans
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # One connection for every thread, serialised by the lock: SQLite writes one at a
            # time anyway, and the counters are read and written in the same transaction.
            self._db = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise SpanStoreError(f"{path}: cannot open the span store: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SpanStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, spans: Sequence[Span]) -> int:
        """Store what fits under the cap; return how many were accepted (the rest are dropped)."""
        if not spans:
            return 0
        with self._lock:
            try:
                with self._db:  # one transaction: the spans and both counters, or nothing
                    stored = _counter(self._db, "stored")
                    room = max(0, self.max_spans - stored)
                    kept = spans[:room]
                    self._db.executemany(
                        f"INSERT INTO spans ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",  # noqa: S608
                        [_row(s) for s in kept],
                    )
                    self._db.execute(
                        "UPDATE counters SET value = value + ? WHERE name = 'stored'", (len(kept),)
                    )
                    self._db.execute(
                        "UPDATE counters SET value = value + ? WHERE name = 'dropped'",
                        (len(spans) - len(kept),),
                    )
            except sqlite3.Error as exc:
                raise SpanStoreError(f"{self.path}: cannot store spans: {exc}") from exc
        return len(kept)

    def counters(self) -> SpanCounters:
        with self._lock:
            return _read_counters(self._db, self.path)

    def read(
        self,
        start_ns: int | None = None,
        end_ns: int | None = None,
        trace_ids: Iterable[str] | None = None,
        *,
        limit: int = DEFAULT_READ_LIMIT,
    ) -> list[Span]:
        """Spans starting in ``[start_ns, end_ns)`` (either open), of ``trace_ids`` if given,
        oldest first, at most ``limit``."""
        where, params = _where(start_ns, end_ns, trace_ids)
        sql = f"SELECT {_COLUMNS} FROM spans{where} ORDER BY start_ns, rowid LIMIT ?"  # noqa: S608
        with self._lock:
            try:
                rows: list[_Row] = self._db.execute(sql, (*params, limit)).fetchall()
            except sqlite3.Error as exc:
                raise SpanStoreError(f"{self.path}: cannot read spans: {exc}") from exc
        return [_span(r) for r in rows]

    def copy_range(
        self, dest_path: Path, start_ns: int | None, end_ns: int | None, *, limit: int = -1
    ) -> int:
        """Copy the spans starting in ``[start_ns, end_ns)`` into a new store at ``dest_path``
        (a run's ``traces.db``), the oldest first and at most ``limit`` (-1: all); return how
        many. An existing file there is added to."""
        where, params = _where(start_ns, end_ns, None)
        SpanStore(dest_path, max_spans=0).close()  # the schema, in a file of its own
        with self._lock:
            try:
                # Row by row inside SQLite: a copy of 200 000 spans never sits in memory.
                self._db.execute("ATTACH DATABASE ? AS dest", (str(dest_path),))
                try:
                    with self._db:
                        n = self._db.execute(
                            _COPY + where + " ORDER BY start_ns, rowid LIMIT ?",
                            (*params, limit),
                        ).rowcount
                        self._db.execute(
                            "UPDATE dest.counters SET value = value + ? WHERE name = 'stored'",
                            (n,),
                        )
                finally:
                    self._db.execute("DETACH DATABASE dest")
            except sqlite3.Error as exc:
                raise SpanStoreError(f"{dest_path}: cannot copy spans there: {exc}") from exc
        return n

    def count(self, start_ns: int | None = None, end_ns: int | None = None) -> int:
        """How many spans start in ``[start_ns, end_ns)`` (either open)."""
        where, params = _where(start_ns, end_ns, None)
        with self._lock:
            try:
                row = self._db.execute(f"SELECT count(*) FROM spans{where}", params).fetchone()  # noqa: S608
            except sqlite3.Error as exc:
                raise SpanStoreError(f"{self.path}: cannot count spans: {exc}") from exc
        return int(row[0])


def read_counters(path: Path) -> SpanCounters:
    """The counters of a store file, read-only: safe while another process writes it."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error as exc:
        raise SpanStoreError(f"{path}: cannot open the span store: {exc}") from exc
    try:
        return _read_counters(db, path)
    finally:
        db.close()


def _read_counters(db: sqlite3.Connection, path: Path) -> SpanCounters:
    try:
        return SpanCounters(stored=_counter(db, "stored"), dropped=_counter(db, "dropped"))
    except sqlite3.Error as exc:
        raise SpanStoreError(f"{path}: cannot read the counters: {exc}") from exc


def _counter(db: sqlite3.Connection, name: str) -> int:
    row: tuple[int] | None = db.execute(
        "SELECT value FROM counters WHERE name = ?", (name,)
    ).fetchone()
    return row[0] if row is not None else 0


def _where(
    start_ns: int | None, end_ns: int | None, trace_ids: Iterable[str] | None
) -> tuple[str, list[int | str]]:
    clauses: list[str] = []
    params: list[int | str] = []
    if start_ns is not None:
        clauses.append("start_ns >= ?")
        params.append(start_ns)
    if end_ns is not None:
        clauses.append("start_ns < ?")
        params.append(end_ns)
    if trace_ids is not None:
        ids = sorted(set(trace_ids))
        # json_each keeps one parameter for any number of ids (SQLite caps parameters).
        clauses.append("trace_id IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(ids))
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _row(s: Span) -> _Row:
    return (
        s.trace_id,
        s.span_id,
        s.parent_id,
        s.service,
        s.name,
        s.kind.value,
        s.start_ns,
        s.end_ns,
        s.status.value,
        s.status_message,
        json.dumps(dict(s.attributes), separators=(",", ":")),
    )


def _span(r: _Row) -> Span:
    attrs: dict[str, AttrValue] = json.loads(r[10])
    return Span(
        trace_id=r[0],
        span_id=r[1],
        parent_id=r[2],
        service=r[3],
        name=r[4],
        kind=SpanKind(r[5]),
        start_ns=r[6],
        end_ns=r[7],
        status=SpanStatus(r[8]),
        status_message=r[9],
        attributes=MappingProxyType(attrs),
    )

"""The report database (read-only, built from data/report.sql) and the writable store."""

from __future__ import annotations

import sqlite3
import time
from importlib import resources
from pathlib import Path

from faultday_refstack.errors import RefstackError

REPORT_SQL = "report.sql"


class ToolDataError(RefstackError):
    """A tool's data store could not be built or opened."""


def report_sql() -> str:
    return resources.files(__package__).joinpath("data", REPORT_SQL).read_text(encoding="utf-8")


def build_report_db(path: Path) -> Path:
    """Build the report database from the committed SQL script (atomic; replaces ``path``)."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        conn.executescript(report_sql())
        conn.commit()
    except sqlite3.Error as exc:
        raise ToolDataError(f"cannot build the report database at {path}: {exc}") from exc
    finally:
        conn.close()
    tmp.replace(path)
    return path


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open the report DB so that no statement can write to it, whatever the SQL says."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    return conn


class Store:
    """The writable side: the message outbox (idempotent) and the records table."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS outbox (
              seq INTEGER PRIMARY KEY AUTOINCREMENT,
              idempotency_key TEXT NOT NULL UNIQUE,
              recipient TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL,
              agent TEXT NOT NULL, ts REAL NOT NULL);
            CREATE TABLE IF NOT EXISTS records (
              record_id TEXT PRIMARY KEY, fields TEXT NOT NULL, version INTEGER NOT NULL,
              ts REAL NOT NULL);
            """
        )

    def send(
        self, *, key: str, recipient: str, subject: str, body: str, agent: str
    ) -> tuple[int, bool]:
        """Append to the outbox once per key; return (message seq, duplicate?)."""
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO outbox (idempotency_key, recipient, subject, body, agent, ts)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (key, recipient, subject, body, agent, time.time()),
        )
        duplicate = cur.rowcount == 0
        row = self.conn.execute(
            "SELECT seq FROM outbox WHERE idempotency_key = ?", (key,)
        ).fetchone()
        return int(row[0]), duplicate

    def outbox(self, limit: int = 1000) -> list[dict[str, object]]:
        rows = self.conn.execute(
            "SELECT seq, idempotency_key, recipient, subject, agent, ts FROM outbox"
            " ORDER BY seq LIMIT ?",
            (limit,),
        ).fetchall()
        names = ("seq", "idempotency_key", "recipient", "subject", "agent", "ts")
        return [dict(zip(names, r, strict=True)) for r in rows]

    def outbox_count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM outbox").fetchone()[0])

    def update(self, *, record_id: str, fields_json: str) -> int:
        """Upsert a record; return its new version."""
        self.conn.execute(
            "INSERT INTO records (record_id, fields, version, ts) VALUES (?, ?, 1, ?)"
            " ON CONFLICT(record_id) DO UPDATE SET fields = excluded.fields,"
            " version = records.version + 1, ts = excluded.ts",
            (record_id, fields_json, time.time()),
        )
        row = self.conn.execute(
            "SELECT version FROM records WHERE record_id = ?", (record_id,)
        ).fetchone()
        return int(row[0])

    def close(self) -> None:
        self.conn.close()

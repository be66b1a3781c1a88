"""The audit log: every tool call, allowed or denied, to a JSONL file and a Redis stream."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from faultday_refstack.agent.deps import Store

log = logging.getLogger(__name__)

STREAM = "fd:audit"
STREAM_MAXLEN = 100_000
REDACTED = "[REDACTED]"


def redact(value: Any, secret_keys: tuple[str, ...]) -> Any:
    """Replace the values of secret-looking keys, at any depth."""
    if isinstance(value, dict):
        return {
            k: REDACTED if any(s in str(k).lower() for s in secret_keys) else redact(v, secret_keys)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v, secret_keys) for v in value]
    return value


class AuditLog:
    """Append-only; the file is the record of truth, the stream is best effort."""

    def __init__(self, path: Path, store: Store | None, *, secret_keys: list[str]) -> None:
        self.path = path
        self.store = store
        self.secret_keys = tuple(k.lower() for k in secret_keys)
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    async def record(
        self,
        *,
        agent: str,
        task: str,
        trace_id: str,
        tool: str,
        args: dict[str, Any],
        decision: str,
        result: str,
        latency_s: float,
    ) -> None:
        entry = {
            "ts": time.time(),
            "agent": agent,
            "task": task,
            "trace_id": trace_id,
            "tool": tool,
            "args": redact(args, self.secret_keys),
            "decision": decision,
            "result": result[:500],
            "latency_ms": round(latency_s * 1000, 2),
        }
        line = json.dumps(entry, separators=(",", ":"), default=str)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        if self.store is None:
            return
        try:
            await self.store.run(
                self.store.r.xadd(STREAM, {"entry": line}, maxlen=STREAM_MAXLEN, approximate=True)
            )
        except Exception as exc:  # noqa: BLE001 - Redis may be the fault under test
            # The JSONL file already holds the entry; losing the stream copy must not fail a call.
            log.warning("audit stream write failed (file kept it): %s", exc)

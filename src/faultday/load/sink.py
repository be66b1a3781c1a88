"""The harness side of the event stream: a loopback socket that turns JSON lines into records."""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from faultday.core.records import AnswerLabel, AnswerSample, RequestRecord

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 16
SELECT_TIMEOUT = 0.05  # real seconds; bounds how long stop() waits for the reader


@dataclass(slots=True)
class SinkStats:
    """How well the harness keeps up: lag = receive time - request end, in real seconds."""

    events: int = 0
    bad_lines: int = 0
    connections: int = 0
    max_lag: float = 0.0
    lag_sum: float = 0.0

    @property
    def mean_lag(self) -> float:
        return self.lag_sum / self.events if self.events else 0.0


class EventSink:
    """Accepts connections from Locust processes; one reader thread for all of them.

    ``to_time`` maps a wall-clock start to scenario time; it returns None while
    the run's clock has not started, and events wait in ``pending`` until it has.
    ``host``/``port`` are where it listens: loopback for local Locust processes;
    load pods on a cluster need an address they can reach.
    """

    def __init__(
        self,
        on_records: Callable[[list[RequestRecord]], None],
        to_time: Callable[[float], float | None],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._on_records = on_records
        self._to_time = to_time
        self._listener = socket.create_server((host, port))
        self._listener.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._buffers: dict[socket.socket, bytearray] = {}
        self._pending: list[tuple[float, dict[str, object]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="load-sink", daemon=True)
        self.stats = SinkStats()

    @property
    def address(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"{host}:{port}"

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self, *, timeout: float = 2.0) -> None:
        """Read what is still buffered, then close every socket; bounded by ``timeout``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._flush_pending(final=True)
        for sock in list(self._buffers):
            self._close(sock)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(self._listener)
        self._listener.close()
        self._sel.close()

    # ---- the reader thread -------------------------------------------------------------
    def _loop(self) -> None:
        idle_after_stop = 0
        while idle_after_stop < 2:
            events = self._sel.select(SELECT_TIMEOUT)
            got = False
            for key, _ in events:
                if key.fileobj is self._listener:
                    self._accept()
                elif isinstance(key.fileobj, socket.socket):  # every other one is a connection
                    got = self._read(key.fileobj) or got
            self._flush_pending(final=False)
            if self._stop.is_set():
                # Drain: keep reading until two quiet rounds in a row.
                idle_after_stop = 0 if got else idle_after_stop + 1

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        self._buffers[conn] = bytearray()
        self._sel.register(conn, selectors.EVENT_READ, None)
        self.stats.connections += 1

    def _read(self, sock: socket.socket) -> bool:
        try:
            data = sock.recv(READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._close(sock)
            return False
        buf = self._buffers[sock]
        buf += data
        cut = buf.rfind(b"\n")
        if cut < 0:
            return True
        lines = bytes(buf[:cut]).split(b"\n")
        del buf[: cut + 1]
        self._handle(lines)
        return True

    def _close(self, sock: socket.socket) -> None:
        self._buffers.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(sock)
        sock.close()

    def _handle(self, lines: list[bytes]) -> None:
        now = time.time()
        for line in lines:
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
                wall = float(ev["ts"])
                lag = now - (wall + float(ev.get("d", 0.0)))
            except (ValueError, KeyError, TypeError):
                self.stats.bad_lines += 1
                continue
            self.stats.events += 1
            self.stats.lag_sum += max(0.0, lag)
            self.stats.max_lag = max(self.stats.max_lag, lag)
            self._pending.append((wall, ev))

    def _flush_pending(self, *, final: bool) -> None:
        if not self._pending:
            return
        if self._to_time(self._pending[0][0]) is None and not final:
            return  # the run's clock has not started: t is not known yet
        pending, self._pending = self._pending, []
        records = []
        for wall, ev in pending:
            t = self._to_time(wall)
            try:
                records.append(to_record(ev, t if t is not None else 0.0))
            except (ValueError, TypeError):
                self.stats.bad_lines += 1
        self._on_records(records)


def _float(value: object) -> float:
    """float() of a JSON number or numeric string; TypeError for anything else (a bad line)."""
    if isinstance(value, int | float | str):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def _int(value: object) -> int:
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"not a number: {value!r}")


def _items(value: object) -> Iterable[object]:
    if isinstance(value, Iterable):
        return value
    raise TypeError(f"not a list: {value!r}")


_LABELS = frozenset(AnswerLabel)
TEXT_LIMIT = 4096  # characters of a quoted answer the harness keeps, whatever a line says


def _strings(value: object, *, limit: int = 20) -> tuple[str, ...]:
    return tuple(str(x)[:64] for x in list(_items(value))[:limit])


def _sample(ev: dict[str, object], t: float, label: str) -> AnswerSample | None:
    """The quoted answer a line carries (``qa``, in reservoir slot ``qk``), if any."""
    if "qa" not in ev:
        return None
    key = tuple(_int(x) for x in _items(ev.get("qk") or ()))
    if len(key) != 3:
        raise ValueError(f"a quoted answer needs qk = [process, slot, index], got {key!r}")
    return AnswerSample(
        t=round(t, 6),
        name=str(ev.get("n") or ""),
        label=label,
        status=_int(ev.get("s") or 0),
        text=str(ev["qa"])[:TEXT_LIMIT],
        key=(key[0], key[1], key[2]),
        sources=_strings(ev.get("qs") or ()),
        cited=_strings(ev.get("qc") or ()),
    )


_HEX = frozenset("0123456789abcdef")


def _trace_id(value: object) -> str:
    """A W3C trace id as the locustfile writes it ("" for none, as in older lines)."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) != 32 or not _HEX.issuperset(value):
        raise ValueError(f"a trace id is 32 lower-case hex digits, got {value!r:.60}")
    if value == "0" * 32:
        raise ValueError("the all-zero trace id is invalid")
    return value


def to_record(ev: dict[str, object], t: float) -> RequestRecord:
    """One event line (see locustfile) → a RequestRecord at scenario time ``t``.

    Keys a line may lack (those of older versions: ``tr``, ``trs``…) take their defaults."""
    quality = str(ev.get("q") or "")
    if quality and quality not in _LABELS:
        raise ValueError(f"unknown answer label {quality!r}")
    trace_id = _trace_id(ev.get("tr"))
    ttft = ev.get("ttft")
    itl = ev.get("itl") or ()
    reasons = ev.get("r") or ()
    return RequestRecord(
        t=round(t, 6),
        duration=_float(ev["d"]),
        ok=bool(ev.get("ok")),
        status=_int(ev.get("s") or 0),
        name=str(ev.get("n") or ""),
        ttft=_float(ttft) if ttft is not None else None,
        itl=tuple(_float(x) for x in _items(itl)),
        tokens=_int(ev.get("tok") or 0),
        degraded=bool(ev.get("deg")),
        reasons=tuple(str(r) for r in _items(reasons)),
        model=str(ev.get("m") or ""),
        error=str(ev.get("e") or ""),
        task_id=str(ev.get("tid") or ""),
        task_state=str(ev.get("st") or ""),
        quality=quality,
        trace_id=trace_id,
        trace_sampled=bool(trace_id) and ev.get("trs") is True,
        sample=_sample(ev, t, quality),
    )

"""The native relay (``relay.c``) seen from Python: adopt, take back, handoffs.

A connection whose first bytes are not an HTTP request, and on which only the
stream toxics act (``latency``, ``bandwidth``, ``slicer``, ``limit_data``,
``timeout``; ``noop``), is relayed entirely by a C thread (epoll + splice(2), a
timerfd for the toxics): no Python runs per chunk, and a connection that ends there
is closed and counted there. Python decides which toxics act on each connection
(toxicity is rolled per connection) and passes each direction's ``Timing``; when a
toxic closes a connection (limit_data, timeout) the relay's note says which, so
the proxy counts it. When the toxics change, the proxy takes its connections
back (``take``) and hands them over again with the new timing, or keeps them in
Python when another toxic acts. The relay hands over connections whose first
bytes are HTTP by itself (HTTP edges are framed and counted in Python). The
shared library is compiled when faultday is installed (``hatch_build.py``, or
``make native``); without it, or with ``FAULTDAY_PROXY_NATIVE=0``, the proxy
relays in Python as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ABI = 4
LIBRARY = Path(__file__).with_name("_relay.so")
ENV_SWITCH = "FAULTDAY_PROXY_NATIVE"
_NOTE = struct.Struct("=Iiq")  # struct fr_note: kind, owner, connection id
NOTE_CLOSED, NOTE_LIMIT, NOTE_TIMEOUT = 3, 4, 5
# What a close note says closed the connection: the toxic type it counts as acting.
CLOSED_BY = {NOTE_LIMIT: "limit_data", NOTE_TIMEOUT: "timeout"}
KIND_UNKNOWN, KIND_TCP, KIND_HTTP = 0, 1, 2
TAKE_BATCH = 256

# received up, sent up, received down, sent down (bytes); connections closed natively
Counters = ctypes.c_uint64 * 5
CLOSED = 4


class _State(ctypes.Structure):
    _fields_ = [
        ("fd", ctypes.c_int32 * 2),
        ("pipe_r", ctypes.c_int32 * 2),
        ("pipe_w", ctypes.c_int32 * 2),
        ("in_pipe", ctypes.c_int64 * 2),
        ("limited", ctypes.c_int64 * 2),
        ("eof", ctypes.c_int32 * 2),
        ("done", ctypes.c_int32 * 2),
        ("kind", ctypes.c_int32),
        ("owner", ctypes.c_int32),
        ("id", ctypes.c_int64),
    ]


class _Params(ctypes.Structure):
    _fields_ = [
        ("latency_ns", ctypes.c_int64),
        ("jitter_ns", ctypes.c_int64),
        ("rate", ctypes.c_int64),
        ("slice_avg", ctypes.c_int64),
        ("slice_var", ctypes.c_int64),
        ("slice_delay_ns", ctypes.c_int64),
        ("limit", ctypes.c_int64),
        ("close_at", ctypes.c_int64),
        ("on", ctypes.c_int32),
        ("lat_first", ctypes.c_int32),
        ("hold", ctypes.c_int32),
        ("pad", ctypes.c_int32),
    ]


@dataclass(frozen=True, slots=True)
class Timing:
    """One direction's stream toxics, as the relay applies them."""

    latency_ms: int = 0
    jitter_ms: int = 0
    rate_kbps: int = 0  # Toxiproxy's bandwidth unit, KB/s; 0 = none
    latency_first: bool = True  # the latency toxic precedes the bandwidth one
    slice_average: int = 0  # slicer's average_size (bytes); 0 = no slicer
    slice_variation: int = 0
    slice_delay_us: int = 0
    limit: int = -1  # limit_data: bytes it still lets through; -1 = none
    hold: bool = False  # timeout: nothing passes
    close_at: float = 0.0  # timeout: time.monotonic() it closes the connection at; 0 = never

    def _params(self) -> _Params:
        # time.monotonic() is CLOCK_MONOTONIC on Linux, the relay's clock.
        return _Params(
            latency_ns=self.latency_ms * 1_000_000,
            jitter_ns=self.jitter_ms * 1_000_000,
            rate=self.rate_kbps * 1000,
            slice_avg=self.slice_average,
            slice_var=self.slice_variation,
            slice_delay_ns=self.slice_delay_us * 1000,
            limit=self.limit,
            close_at=max(1, int(self.close_at * 1e9)) if self.close_at else 0,
            on=1,
            lat_first=int(self.latency_first),
            hold=int(self.hold),
        )


@dataclass(frozen=True, slots=True)
class DirectionState:
    pipe: tuple[int, int] | None
    in_pipe: int
    eof: bool
    done: bool
    limited: int = 0  # bytes a limit_data toxic let through while the relay held it


@dataclass(frozen=True, slots=True)
class Released:
    """A connection handed back by the relay: its sockets and pipes are the caller's now."""

    owner: int
    id: int  # the proxy's id for a connection it tracks; 0 = none
    client: socket.socket
    upstream: socket.socket
    up: DirectionState
    down: DirectionState
    kind: int


def _load() -> ctypes.CDLL | None:
    if os.environ.get(ENV_SWITCH, "1") == "0":
        log.info("native relay off (%s=0): relaying in Python", ENV_SWITCH)
        return None
    try:
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as exc:
        log.info("native relay unavailable (%s): relaying in Python", exc)
        return None
    if lib.fr_abi() != ABI:
        log.warning(
            "native relay %s is stale (ABI %d, want %d); rebuild with `make native`",
            LIBRARY,
            lib.fr_abi(),
            ABI,
        )
        return None
    lib.fr_open.argtypes = [ctypes.c_int]
    lib.fr_open.restype = ctypes.c_void_p
    lib.fr_adopt.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int64,
        ctypes.POINTER(_Params),
        ctypes.POINTER(_State),
    ]
    lib.fr_adopt.restype = ctypes.c_int
    lib.fr_take.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_State), ctypes.c_int]
    lib.fr_take.restype = ctypes.c_int
    lib.fr_take_handoffs.argtypes = [ctypes.c_void_p, ctypes.POINTER(_State), ctypes.c_int]
    lib.fr_take_handoffs.restype = ctypes.c_int
    lib.fr_close.argtypes = [ctypes.c_void_p]
    lib.fr_close.restype = None
    return lib


def available() -> bool:
    return _load() is not None


def _released(st: _State) -> Released:
    def direction(i: int) -> DirectionState:
        pipe = (st.pipe_r[i], st.pipe_w[i]) if st.pipe_r[i] >= 0 else None
        return DirectionState(
            pipe, int(st.in_pipe[i]), bool(st.eof[i]), bool(st.done[i]), int(st.limited[i])
        )

    return Released(
        owner=int(st.owner),
        id=int(st.id),
        client=socket.socket(fileno=st.fd[0]),
        upstream=socket.socket(fileno=st.fd[1]),
        up=direction(0),
        down=direction(1),
        kind=int(st.kind),
    )


def discard(released: Released) -> None:
    """Close a taken-back connection nobody will carry on."""
    released.client.close()
    released.upstream.close()
    for d in (released.up, released.down):
        if d.pipe is not None:
            os.close(d.pipe[0])
            os.close(d.pipe[1])


class NativeRelay:
    """One relay thread for every proxy of a server; used from the event-loop thread only."""

    def __init__(
        self,
        lib: ctypes.CDLL,
        loop: asyncio.AbstractEventLoop,
        on_handoff: Callable[[Released], None],
        on_closed: Callable[[int, int, str | None], None],
    ) -> None:
        self._lib = lib
        self._loop = loop
        self._on_handoff = on_handoff
        self._on_closed = on_closed
        self._rfd, self._wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        handle = lib.fr_open(self._wfd)
        if not handle:
            os.close(self._rfd)
            os.close(self._wfd)
            raise OSError("native relay: cannot start its thread")
        self._handle: int | None = handle
        self._states = (_State * TAKE_BATCH)()
        self._partial = b""  # a note split across two reads
        loop.add_reader(self._rfd, self._drain)

    @classmethod
    def start(
        cls,
        loop: asyncio.AbstractEventLoop,
        on_handoff: Callable[[Released], None],
        on_closed: Callable[[int, int, str | None], None],
    ) -> NativeRelay | None:
        """The relay, or None where it is not built or switched off (Python relays then)."""
        lib = _load()
        if lib is None:
            return None
        try:
            return cls(lib, loop, on_handoff, on_closed)
        except OSError as exc:
            log.warning("%s: relaying in Python", exc)
            return None

    def adopt(
        self,
        owner: int,
        client: socket.socket,
        upstream: socket.socket,
        counters: ctypes.Array[ctypes.c_uint64],
        *,
        conn_id: int = 0,
        timing: tuple[Timing | None, Timing | None] = (None, None),
        state: Released | None = None,
    ) -> bool:
        """Relay this pair natively from now on; False when the relay refused it.

        ``timing``: the upstream and downstream directions' toxics (None: none);
        ``state``: a connection taken back earlier, whose pipes go with it.
        """
        params = None
        if timing != (None, None):
            params = (_Params * 2)(*(t._params() if t else _Params() for t in timing))
        st = None
        if state is not None:
            st = _State()
            st.kind = state.kind
            for i, d in enumerate((state.up, state.down)):
                st.pipe_r[i], st.pipe_w[i] = d.pipe if d.pipe is not None else (-1, -1)
                st.in_pipe[i] = d.in_pipe
        rc = self._lib.fr_adopt(
            self._handle,
            client.fileno(),
            upstream.fileno(),
            ctypes.addressof(counters),
            owner,
            conn_id,
            params,
            None if st is None else ctypes.byref(st),
        )
        if rc != 0:
            return False
        client.detach()
        upstream.detach()
        return True

    def take(self, owner: int) -> list[Released]:
        """Every connection of proxy ``owner`` the relay still holds, handed back."""
        out: list[Released] = []
        while n := self._lib.fr_take(self._handle, owner, self._states, TAKE_BATCH):
            out.extend(_released(self._states[i]) for i in range(n))
        return out

    def _drain(self) -> None:
        data = self._partial
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._rfd, _NOTE.size * 512):
                data += chunk
        whole = len(data) - len(data) % _NOTE.size
        self._partial = data[whole:]
        for kind, owner, conn_id in _NOTE.iter_unpack(data[:whole]):
            if kind == NOTE_CLOSED or kind in CLOSED_BY:
                self._on_closed(owner, conn_id, CLOSED_BY.get(kind))
        # Which connections to hand over is asked of the relay, not read from notes.
        while n := self._lib.fr_take_handoffs(self._handle, self._states, TAKE_BATCH):
            for i in range(n):
                self._on_handoff(_released(self._states[i]))

    def close(self) -> None:
        """Stop the thread; connections not taken back are closed by the relay."""
        if self._handle is None:
            return
        self._loop.remove_reader(self._rfd)
        self._lib.fr_close(self._handle)
        self._handle = None
        with contextlib.suppress(OSError):
            os.close(self._rfd)
        with contextlib.suppress(OSError):
            os.close(self._wfd)

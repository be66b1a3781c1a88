"""The native relay (``relay.c``) seen from Python: adopt, take back, handoffs.

With no toxic on a proxy, a new connection whose first bytes are not an HTTP
request is relayed entirely by a C thread (epoll + splice(2)): no Python runs
per chunk, and a connection that ends there is closed and counted there. The
proxy takes its connections back (``take``) when a toxic is added; the relay
hands over connections whose first bytes are HTTP by itself (HTTP edges are
framed and counted in Python). The shared library is compiled when faultday
is installed (``hatch_build.py``, or ``make native``); without it, or with
``FAULTDAY_PROXY_NATIVE=0``, the proxy relays in Python as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ABI = 2
LIBRARY = Path(__file__).with_name("_relay.so")
ENV_SWITCH = "FAULTDAY_PROXY_NATIVE"
_NOTE_SIZE = 8  # struct fr_note: kind, owner (two 32-bit ints)
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
        ("eof", ctypes.c_int32 * 2),
        ("done", ctypes.c_int32 * 2),
        ("kind", ctypes.c_int32),
        ("owner", ctypes.c_int32),
    ]


@dataclass(frozen=True, slots=True)
class DirectionState:
    pipe: tuple[int, int] | None
    in_pipe: int
    eof: bool
    done: bool


@dataclass(frozen=True, slots=True)
class Released:
    """A connection handed back by the relay: its sockets and pipes are the caller's now."""

    owner: int
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
        return DirectionState(pipe, int(st.in_pipe[i]), bool(st.eof[i]), bool(st.done[i]))

    return Released(
        owner=int(st.owner),
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
    ) -> None:
        self._lib = lib
        self._loop = loop
        self._on_handoff = on_handoff
        self._rfd, self._wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        handle = lib.fr_open(self._wfd)
        if not handle:
            os.close(self._rfd)
            os.close(self._wfd)
            raise OSError("native relay: cannot start its thread")
        self._handle: int | None = handle
        self._states = (_State * TAKE_BATCH)()
        loop.add_reader(self._rfd, self._drain)

    @classmethod
    def start(
        cls, loop: asyncio.AbstractEventLoop, on_handoff: Callable[[Released], None]
    ) -> NativeRelay | None:
        lib = _load()
        if lib is None:
            return None
        try:
            return cls(lib, loop, on_handoff)
        except OSError as exc:
            log.warning("%s: relaying in Python", exc)
            return None

    def adopt(
        self,
        owner: int,
        client: socket.socket,
        upstream: socket.socket,
        counters: ctypes.Array[ctypes.c_uint64],
    ) -> bool:
        """Relay this pair natively from now on; False when the relay refused it."""
        rc = self._lib.fr_adopt(
            self._handle, client.fileno(), upstream.fileno(), ctypes.addressof(counters), owner
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
        # The notes only wake this loop; which connections to take is asked of the relay.
        with contextlib.suppress(BlockingIOError):
            while os.read(self._rfd, _NOTE_SIZE * 512):
                pass
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

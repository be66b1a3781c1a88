"""The native relay (``relay.c``) seen from Python: adopt, release, notes.

With no toxic on a proxy, a new connection whose first bytes are not an HTTP
request is relayed entirely by a C thread (epoll + splice(2)): no Python runs
per chunk or per close. The proxy takes a connection back (``release``) when
a toxic is added or when its first bytes turn out to be HTTP (HTTP edges are
framed and counted in Python). The shared library is compiled when faultday is
installed (``hatch_build.py``, or ``make native``); without it, or with
``FAULTDAY_PROXY_NATIVE=0``, the proxy relays in Python as before.
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

ABI = 1
LIBRARY = Path(__file__).with_name("_relay.so")
ENV_SWITCH = "FAULTDAY_PROXY_NATIVE"
_NOTE = struct.Struct("=QII")
NOTE_CLOSED = 1
NOTE_HTTP = 2
KIND_UNKNOWN, KIND_TCP, KIND_HTTP = 0, 1, 2

Counters = ctypes.c_uint64 * 4  # received up, sent up, received down, sent down


class _State(ctypes.Structure):
    _fields_ = [
        ("fd", ctypes.c_int32 * 2),
        ("pipe_r", ctypes.c_int32 * 2),
        ("pipe_w", ctypes.c_int32 * 2),
        ("in_pipe", ctypes.c_int64 * 2),
        ("eof", ctypes.c_int32 * 2),
        ("done", ctypes.c_int32 * 2),
        ("kind", ctypes.c_int32),
        ("pad", ctypes.c_int32),
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
        ctypes.c_uint64,
        ctypes.POINTER(ctypes.c_void_p),
    ]
    lib.fr_adopt.restype = ctypes.c_int
    lib.fr_release.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_State)]
    lib.fr_release.restype = ctypes.c_int
    lib.fr_close.argtypes = [ctypes.c_void_p]
    lib.fr_close.restype = None
    return lib


def available() -> bool:
    return _load() is not None


@dataclass(slots=True)
class _Held:
    handle: int
    owner: object


class NativeRelay:
    """One relay thread for every proxy of a server; used from the event-loop thread only."""

    def __init__(
        self,
        lib: ctypes.CDLL,
        loop: asyncio.AbstractEventLoop,
        on_note: Callable[[object, int, int], None],
    ) -> None:
        self._lib = lib
        self._loop = loop
        self._on_note = on_note
        self._rfd, self._wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        handle = lib.fr_open(self._wfd)
        if not handle:
            os.close(self._rfd)
            os.close(self._wfd)
            raise OSError("native relay: cannot start its thread")
        self._handle: int | None = handle
        self._held: dict[int, _Held] = {}
        self._next = 1
        loop.add_reader(self._rfd, self._drain)

    @classmethod
    def start(
        cls, loop: asyncio.AbstractEventLoop, on_note: Callable[[object, int, int], None]
    ) -> NativeRelay | None:
        lib = _load()
        if lib is None:
            return None
        try:
            return cls(lib, loop, on_note)
        except OSError as exc:
            log.warning("%s: relaying in Python", exc)
            return None

    def adopt(
        self,
        owner: object,
        client: socket.socket,
        upstream: socket.socket,
        counters: ctypes.Array[ctypes.c_uint64],
    ) -> int | None:
        """Relay this pair natively; the token, or None when the relay refused it."""
        token = self._next
        self._next += 1
        out = ctypes.c_void_p()
        rc = self._lib.fr_adopt(
            self._handle,
            client.fileno(),
            upstream.fileno(),
            ctypes.addressof(counters),
            token,
            ctypes.byref(out),
        )
        if rc != 0 or not out.value:
            return None
        client.detach()
        upstream.detach()
        self._held[token] = _Held(out.value, owner)
        return token

    def release(self, token: int) -> Released | None:
        """Take a connection back; None when the relay had already closed it."""
        held = self._held.pop(token, None)
        if held is None:
            return None
        st = _State()
        if not self._lib.fr_release(self._handle, held.handle, ctypes.byref(st)):
            return None

        def direction(i: int) -> DirectionState:
            pipe = (st.pipe_r[i], st.pipe_w[i]) if st.pipe_r[i] >= 0 else None
            return DirectionState(pipe, int(st.in_pipe[i]), bool(st.eof[i]), bool(st.done[i]))

        return Released(
            client=socket.socket(fileno=st.fd[0]),
            upstream=socket.socket(fileno=st.fd[1]),
            up=direction(0),
            down=direction(1),
            kind=int(st.kind),
        )

    def _drain(self) -> None:
        try:
            data = os.read(self._rfd, _NOTE.size * 512)
        except BlockingIOError:
            return
        for token, kind, _pad in _NOTE.iter_unpack(data):
            held = self._held.get(token)
            if held is not None:  # else: released by Python before the note came
                self._on_note(held.owner, token, kind)

    def close(self) -> None:
        """Stop the thread; any connection not released is closed by the relay."""
        if self._handle is None:
            return
        for token in list(self._held):
            released = self.release(token)
            if released is not None:
                released.client.close()
                released.upstream.close()
                for d in (released.up, released.down):
                    if d.pipe is not None:
                        os.close(d.pipe[0])
                        os.close(d.pipe[1])
        self._loop.remove_reader(self._rfd)
        self._lib.fr_close(self._handle)
        self._handle = None
        with contextlib.suppress(OSError):
            os.close(self._rfd)
        with contextlib.suppress(OSError):
            os.close(self._wfd)

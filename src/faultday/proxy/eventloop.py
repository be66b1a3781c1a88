"""An asyncio loop whose timers are accurate to tens of µs, not to a millisecond.

``selectors.EpollSelector`` rounds every timeout *up* to whole milliseconds
(epoll_wait's unit), so a 50 ms latency toxic would fire on average ~0.5 ms
late. Here the sub-millisecond rest of a timeout is waited with ``select(2)``
on the epoll descriptor itself (µs resolution), then epoll is polled.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import select
import selectors
import time

_FD_SETSIZE = 1024


class PreciseEpollSelector(selectors.EpollSelector):
    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        epfd = self.fileno()  # the epoll descriptor itself
        if timeout is None or timeout <= 0 or epfd >= _FD_SETSIZE:
            return super().select(timeout)
        deadline = time.monotonic() + timeout
        whole = math.floor(timeout * 1e3) * 1e-3
        if whole > 0:
            ready = super().select(whole)
            if ready:
                return ready
        rest = deadline - time.monotonic()
        if rest > 0:
            with contextlib.suppress(InterruptedError):
                select.select([epfd], [], [], rest)
        return super().select(0)


def new_event_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(PreciseEpollSelector())

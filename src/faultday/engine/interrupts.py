"""SIGINT/SIGTERM during a run: the first stops it, none ever abandons a revert.

1. The first signal asks the run to stop: the fault windows end, every fault is
   reverted, the stack goes down, the journal and the report are written (exit 3).
2. A second one, while the run is still starting or waiting (a slow stack-up),
   stops the waiting at once; the reverts and the stack-down still run.
3. Once reverting has begun, signals no longer interrupt anything. The first one
   in that phase only says what is going on; the next skips the waits for
   restarts (a ``gpu_loss`` replica is not brought back, since the stack goes
   down anyway) while every toxic is still removed, every paused process resumed,
   and the journal written.

Only one KeyboardInterrupt is ever raised, and never once reverting has begun:
an exception raised inside a revert would leave the fault in place.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Protocol

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interruptible(Protocol):
    """The parts of a run the signal policy drives."""

    @property
    def reverting(self) -> bool:
        """True from the moment the run starts undoing its faults."""
        ...

    def request_stop(self, reason: str) -> None: ...

    def hurry(self) -> None:
        """Skip waits for restarts; every other revert still runs."""
        ...


class SignalPolicy:
    """The handler for SIGINT/SIGTERM of one command; ``say`` prints to the console."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._run: Interruptible | None = None
        self.stop_requested = False  # for loops between runs (a game day)
        self._raised = False
        self._during_revert = 0

    def attach(self, run: Interruptible | None) -> None:
        """The run signals now act on (None between the runs of a game day)."""
        self._run = run
        self._during_revert = 0
        if run is not None and self.stop_requested:
            run.request_stop("interrupted")

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        run = self._run
        if run is not None and run.reverting:
            self._while_reverting(run, name)
            return
        if not self.stop_requested:
            self.stop_requested = True
            if run is not None:
                run.request_stop(f"interrupted by {name}")
            self._say(
                f"{name}: stopping — every fault is reverted and the stack stopped; "
                "send it again to stop waiting (the reverts still run)"
            )
            return
        if not self._raised:
            self._raised = True
            self._say(f"{name}: no more waiting; reverting every fault now")
            raise KeyboardInterrupt
        self._say(f"{name}: already stopping; the reverts will run")

    def _while_reverting(self, run: Interruptible, name: str) -> None:
        self._during_revert += 1
        if self._during_revert == 1:
            self._say(
                f"{name}: reverts in progress and not interruptible. Another signal skips "
                "the waits for restarts; toxics are still removed, paused processes "
                "resumed, the stack stopped and the journal written"
            )
            return
        run.hurry()
        self._say(
            f"{name}: skipping the waits for restarts; still removing toxics, "
            "resuming paused processes, stopping the stack and writing the journal"
        )

    @contextmanager
    def installed(self) -> Iterator[SignalPolicy]:
        """Install the handler for SIGINT and SIGTERM; restore the previous ones after."""
        old = {s: signal.signal(s, self.handle) for s in SIGNALS}
        try:
            yield self
        finally:
            for s, h in old.items():
                signal.signal(s, h)

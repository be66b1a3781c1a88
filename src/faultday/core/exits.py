"""faultday's exit codes: one table, the README's "Exit codes".

Only ``faultday.cli`` turns exceptions into these (``exit_code_for``); a command
that ends without an exception (a failed check, ``stack status`` of a stack that
is not up) raises ``typer.Exit`` with one of them, never a bare number.
"""

from __future__ import annotations

from enum import IntEnum

from faultday.core.journal import RunVerdict


class ExitCode(IntEnum):
    """What a ``faultday`` command's exit status means."""

    PASSED = 0  # every check held; the command did what was asked
    FAILED = 1  # the run completed and a check did not pass (or: lint found errors, not up)
    INVALID = 2  # a scenario, profile or option is wrong
    ABORTED = 3  # an abort condition tripped, or SIGINT/SIGTERM; every fault was reverted
    ERROR = 4  # harness or stack error

    @property
    def meaning(self) -> str:
        """How the README's table names it."""
        return _MEANING[self]


_MEANING = {
    ExitCode.PASSED: "passed",
    ExitCode.FAILED: "failed",
    ExitCode.INVALID: "invalid input",
    ExitCode.ABORTED: "aborted",
    ExitCode.ERROR: "harness or stack error",
}


# A run's verdict as the exit status of `faultday run` (and the worst of a game day's).
VERDICT_EXIT: dict[RunVerdict, ExitCode] = {
    RunVerdict.PASSED: ExitCode.PASSED,
    RunVerdict.FAILED: ExitCode.FAILED,
    RunVerdict.ABORTED: ExitCode.ABORTED,
    RunVerdict.ERROR: ExitCode.ERROR,
    RunVerdict.RUNNING: ExitCode.ERROR,
}

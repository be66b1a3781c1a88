"""The error hierarchy. Only ``cli.py`` turns these into exit codes (README)."""

from __future__ import annotations

from faultday_wire.problems import Problem


class FaultdayError(Exception):
    """Root of every error faultday raises on purpose."""


class ScenarioError(FaultdayError):
    """A scenario or profile file is invalid; carries every problem found in one pass."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @property
    def file(self) -> str:
        return self.problems[0].file if self.problems else ""

    @property
    def line(self) -> int:
        return self.problems[0].line if self.problems else 0


class UsageError(FaultdayError):
    """A command was called wrongly (missing file, bad option value)."""


class StackError(FaultdayError):
    """The system under test could not be started, reached or stopped."""


class InjectionError(FaultdayError):
    """A fault could not be injected."""


class RevertError(FaultdayError):
    """One or more reverts failed; the rest still ran."""


class RunAborted(FaultdayError):
    """An abort condition tripped; faults were reverted and the run stopped."""

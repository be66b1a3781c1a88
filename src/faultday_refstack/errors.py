"""The reference stack's own errors; it shares none with the harness (it runs as processes)."""

from __future__ import annotations

from dataclasses import dataclass


class RefstackError(Exception):
    """Root of every error a reference-stack service raises on purpose."""


class UsageError(RefstackError):
    """A service was started wrongly (a bad option value, an unreadable config file)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in a service's config file, with its position and YAML path."""

    file: str
    line: int
    col: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(RefstackError):
    """A config file is invalid; carries every problem found in one pass."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

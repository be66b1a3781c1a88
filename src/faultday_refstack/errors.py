"""The reference stack's own errors; of the harness's it shares only ``Problem``, through
``faultday_wire`` (it runs as processes and imports nothing of faultday)."""

from __future__ import annotations

from faultday_wire.problems import Problem


class RefstackError(Exception):
    """Root of every error a reference-stack service raises on purpose."""


class UsageError(RefstackError):
    """A service was started wrongly (a bad option value, an unreadable config file)."""


class ConfigError(RefstackError):
    """A config file is invalid; carries every problem found in one pass."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

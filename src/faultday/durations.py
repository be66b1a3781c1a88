"""Durations are strings with units in every user-facing file: ``250ms``, ``30s``, ``2m``."""

from __future__ import annotations

import re

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h)\s*$")
UNITS_HINT = "a number with a unit: us, ms, s, m or h (e.g. 250ms, 30s, 2m)"


def parse_duration(text: str) -> float:
    """Return seconds for a duration string; raise ValueError naming what would be valid."""
    if isinstance(text, bool) or not isinstance(text, str):
        # ValueError, not TypeError: pydantic turns only ValueError into a validation error.
        raise ValueError(f"expected a duration string, {UNITS_HINT}; got {text!r}")  # noqa: TRY004
    match = _RE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration; expected {UNITS_HINT}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def format_duration(seconds: float) -> str:
    """Render seconds the way a person writes them (``1.5s``, ``250ms``, ``2m``)."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    if seconds >= 1:
        return f"{seconds:g}s"
    return f"{seconds * 1000:g}ms"

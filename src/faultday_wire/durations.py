"""Durations with units (``250ms``, ``30s``, ``2m``) in the services' config files.

The same grammar as the harness's (``faultday.core.durations``), which lints
the agent's policy file: the two copies are kept equal on purpose by
tests/refstack/test_layers.py, because the reference stack imports nothing of
the harness.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator

UNIT_SECONDS: dict[str, float] = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_CHARS = 32  # so the number can never overflow to infinity
# ASCII classes only ([0-9], not \d, which also matches other scripts' digits); the trailing
# class takes the newline a YAML block scalar ends with.
PATTERN = r"^[ \t]*([0-9]+(?:\.[0-9]+)?)[ \t]*(us|ms|s|m|h)[ \t\n]*$"
_RE = re.compile(PATTERN)
UNITS_HINT = "a number with a unit: us, ms, s, m or h (e.g. 250ms, 30s, 2m)"


def shown(value: object, limit: int = 40) -> str:
    """``repr`` of a user's value, cut short: an error message never echoes a megabyte."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit limit for str()
        return "a number with too many digits"
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def parse_duration(text: object) -> float:
    """Seconds for a duration string; ValueError (pydantic reports it) naming what is valid."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        # Bare numbers are ambiguous (seconds? ms?); the format asks for units.
        raise ValueError(f"{shown(text)} has no unit; write it as e.g. '{shown(text)}s'")  # noqa: TRY004
    if not isinstance(text, str):
        raise ValueError(f"expected a duration string, {UNITS_HINT}; got {shown(text)}")  # noqa: TRY004
    match = _RE.search(text) if len(text) <= MAX_CHARS else None
    if match is None:
        raise ValueError(f"{shown(text)} is not a duration; expected {UNITS_HINT}")
    seconds = float(match.group(1)) * UNIT_SECONDS[match.group(2)]
    if not math.isfinite(seconds):  # unreachable within MAX_CHARS; kept as the last word
        raise ValueError(f"{shown(text)} is too large a duration")
    return seconds


def _seconds(value: Any) -> float:
    return parse_duration(value)


Duration = Annotated[float, BeforeValidator(_seconds)]
"""Seconds in Python; a string with a unit in the file."""

"""Durations with units (``250ms``, ``30s``, ``2m``) in the services' config files.

The same grammar as the harness's (``faultday.core.durations``): the two copies
are kept equal on purpose by tests/refstack/test_wire.py. The agent's policy
model (:mod:`faultday_wire.policy`) reads its durations with ``Duration``, in the
agent and in ``faultday lint`` alike, so a value one side refuses the other does
too. A ``Duration`` is also bounded (``MAX_SECONDS``), so arithmetic on it stays
small.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator

UNIT_SECONDS: dict[str, float] = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_CHARS = 32  # so the number can never overflow to infinity
MAX_SECONDS = 86_400.0  # a day: no timeout, backoff or wait of a service is longer
# ASCII classes only ([0-9], not \d, which also matches other scripts' digits); the trailing
# class takes the newline a YAML block scalar ends with.
PATTERN = r"^[ \t]*([0-9]+(?:\.[0-9]+)?)[ \t]*(us|ms|s|m|h)[ \t\n]*$"
_RE = re.compile(PATTERN)
# A number and a word, loosely: to say what is wrong with a string the grammar refuses.
_LOOSE = re.compile(r"^\s*(.*?)\s*([A-Za-z]*)\s*$", re.DOTALL)
UNITS_HINT = "a number with a unit: us, ms, s, m or h (e.g. 250ms, 30s, 2m)"


def shown(value: object, limit: int = 40) -> str:
    """``repr`` of a user's value, cut short: an error message never echoes a megabyte."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit limit for str()
        return "a number with too many digits"
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _what_is_wrong(number: float, text: str) -> str | None:
    """Why a number is no duration, or None if it is a fine one."""
    if math.isnan(number):
        return f"{text} is not a number; expected {UNITS_HINT}"
    if number < 0:
        return f"{text} is negative; expected 0 or more, {UNITS_HINT}"
    if math.isinf(number):
        return f"{text} is too large; expected a duration of at most {MAX_SECONDS / 3600:g}h"
    return None


def _diagnose(text: str) -> str:
    """What is wrong with a string the grammar refuses (negative, too large, not a number)."""
    loose = _LOOSE.match(text)
    number, unit = (loose.group(1), loose.group(2)) if loose else (text, "")
    try:
        value = float(number)
    except ValueError:
        return f"{shown(text)} is not a number with a unit; expected {UNITS_HINT}"
    factor = UNIT_SECONDS.get(unit)
    wrong = _what_is_wrong(value * (factor or 1.0), shown(text))
    if wrong is not None:
        return wrong
    if factor is not None and value * factor > MAX_SECONDS:
        return f"{shown(text)} is too large; expected a duration of at most {MAX_SECONDS / 3600:g}h"
    if factor is None:
        return f"{shown(text)}: {shown(unit) if unit else 'no'} unit; expected {UNITS_HINT}"
    return f"{shown(text)} is not a duration as written; expected {UNITS_HINT}"


def parse_duration(text: object) -> float:
    """Seconds for a duration string; ValueError (pydantic reports it) naming what is valid."""
    if isinstance(text, bool) or not isinstance(text, int | float | str):
        raise ValueError(f"expected a duration string, {UNITS_HINT}; got {shown(text)}")  # noqa: TRY004
    if isinstance(text, int | float):
        # Bare numbers are ambiguous (seconds? ms?); the format asks for units.
        wrong = _what_is_wrong(float(text), shown(text)) if isinstance(text, float) else None
        if wrong is None and isinstance(text, int) and text < 0:
            wrong = f"{shown(text)} is negative; expected 0 or more, {UNITS_HINT}"
        raise ValueError(wrong or f"{shown(text)} has no unit; write it as e.g. '{shown(text)}s'")  # noqa: TRY004
    if len(text) > MAX_CHARS:
        raise ValueError(
            f"{shown(text)} is longer than {MAX_CHARS} characters; expected {UNITS_HINT}"
        )
    match = _RE.search(text)
    if match is None:
        raise ValueError(_diagnose(text))
    seconds = float(match.group(1)) * UNIT_SECONDS[match.group(2)]
    if not math.isfinite(seconds):  # unreachable within MAX_CHARS; kept as the last word
        raise ValueError(f"{shown(text)} is too large a duration")
    return seconds


def _bounded_seconds(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds > MAX_SECONDS:
        raise ValueError(
            f"{shown(value)} is too large; expected a duration of at most {MAX_SECONDS / 3600:g}h"
        )
    return seconds


Duration = Annotated[float, BeforeValidator(_bounded_seconds)]
"""Seconds in Python, 0 to ``MAX_SECONDS``; a string with a unit in the file."""

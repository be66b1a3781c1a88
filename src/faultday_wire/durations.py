"""Durations are strings with units in every user-facing file: ``250ms``, ``30s``, ``2m``.

The one grammar of both sides: the harness's scenarios and profiles
(``faultday.core.types``) and the services' config files (the agent's policy,
:mod:`faultday_wire.policy`, read by the agent and by ``faultday lint`` alike)
parse with ``parse_duration`` here, so a value one side refuses the other does
too, with the same words.

One regular expression, ``PATTERN``, is both the parser's and the JSON Schema's,
so an editor and ``faultday validate`` accept the same strings. It is written
with ASCII classes only (``[0-9]``, not ``\\d``, which in Python also matches
Arabic-Indic or full-width digits) and means the same in Python and in
ECMA-262, the dialect of JSON Schema. A duration is at most ``MAX_CHARS``
characters, so its number can never overflow to infinity.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Annotated, Any

from pydantic import BeforeValidator

UNIT_SECONDS: dict[str, Fraction] = {
    "us": Fraction(1, 1_000_000),
    "ms": Fraction(1, 1_000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}
_UNITS = {unit: float(seconds) for unit, seconds in UNIT_SECONDS.items()}
MAX_CHARS = 32

BLANK = r"[ \t]*"  # white space inside a duration and before it
# Trailing white space may include line breaks: a YAML block scalar (``|``) ends with
# one. Python's ``$`` also matches before a final newline and ECMA's does not; a
# class that takes the newline itself makes both dialects agree.
TRAILING_BLANK = r"[ \t\n]*"
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_UNIT_ALTS = "us|ms|s|m|h"
PATTERN = f"^{BLANK}({_NUMBER}){BLANK}({_UNIT_ALTS}){TRAILING_BLANK}$"
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


def _match(text: object) -> re.Match[str]:
    if isinstance(text, bool) or not isinstance(text, str):
        # ValueError, not TypeError: pydantic turns only ValueError into a validation error.
        raise ValueError(f"expected a duration string, {UNITS_HINT}; got {shown(text)}")  # noqa: TRY004
    if len(text) > MAX_CHARS:
        raise ValueError(
            f"{shown(text)} is not a duration: longer than {MAX_CHARS} characters; "
            f"expected {UNITS_HINT}"
        )
    match = _RE.search(text)
    if match is None:
        raise ValueError(_diagnose(text))
    return match


def number_problem(value: float, text: str) -> str | None:
    """Why a number can be no duration (not a number, negative, infinite), or None."""
    if math.isnan(value):
        return f"{text} is not a number; expected {UNITS_HINT}"
    if value < 0:
        return f"{text} is negative; a duration is 0 or more, {UNITS_HINT}"
    if math.isinf(value):
        return f"{text} is too large: it overflows a number; expected {UNITS_HINT}"
    return None


def loose_seconds(text: object) -> float | None:
    """Seconds for what reads as a number and a unit even where the grammar refuses it
    (``1e9s``, ``-5s``, ``nan s``); None when it does not. For messages only."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return None
    number, unit = _split(text)
    if unit not in _UNITS or not number.isascii():
        return None
    try:
        return float(number) * _UNITS[unit]
    except ValueError:
        return None


def _split(text: str) -> tuple[str, str]:
    """A number and a unit, loosely (``nans`` is ``nan`` and ``s``)."""
    loose = _LOOSE.match(text)
    number, unit = (loose.group(1), loose.group(2)) if loose else (text, "")
    if not number:  # letters only: the unit is the longest known ending
        for known in sorted(_UNITS, key=len, reverse=True):
            if unit.endswith(known) and len(unit) > len(known):
                return unit[: -len(known)], known
    return number, unit


def _diagnose(text: str) -> str:
    """What is wrong with a string the grammar refuses: say it, and what would be valid."""
    number, unit = _split(text)
    try:
        # isascii: float() also reads Arabic-Indic and full-width digits, the grammar does not.
        value = float(number) if number.isascii() else None
    except ValueError:
        value = None
    if value is None:
        return _not_a_number(number, text)
    wrong = number_problem(value, shown(text))
    if wrong is not None:
        return wrong
    if unit not in _UNITS:
        said = f"unit {shown(unit)} is not one of" if unit else "it has no unit; give one of"
        return f"{shown(text)} is not a duration: {said} us, ms, s, m or h (e.g. 30s)"
    if "e" in number.lower():
        return _exponent(number, unit, text)
    if number.startswith(("+", "-")):
        return f"{shown(text)} is not a duration: write it without a sign, {UNITS_HINT}"
    return f"{shown(text)} is not a duration; expected {UNITS_HINT}"


def _not_a_number(number: str, text: str) -> str:
    if not number:
        return f"{shown(text)} is not a duration: the number is missing; expected {UNITS_HINT}"
    digits = "" if number.isascii() else " in ASCII digits (0-9)"
    return (
        f"{shown(text)} is not a duration: {shown(number)} is not a number{digits}; "
        f"expected {UNITS_HINT}"
    )


def _exponent(number: str, unit: str, text: str) -> str:
    exact = Decimal(number)
    # adjusted() first: "1e-999999999s" written out would be a gigabyte of zeros.
    if abs(exact.adjusted()) >= MAX_CHARS or len(digits := format(exact, "f") + unit) > MAX_CHARS:
        size = "large" if exact.adjusted() > 0 else "precise"
        return (
            f"{shown(text)} is too {size}: written out it has more than {MAX_CHARS} "
            f"characters, the most a duration may have"
        )
    return f"{shown(text)} is not a duration: exponent notation is not accepted; write {digits}"


def parse_duration(text: object) -> float:
    """Return seconds for a duration string; raise ValueError naming what would be valid.

    Anything but a string (a YAML number, a list) is a ValueError too, so a raw document's
    value can be passed as it is.
    """
    match = _match(text)
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds):  # unreachable within MAX_CHARS; kept as the last word
        raise ValueError(f"{shown(text)} is too large a duration")
    return seconds


def exact_seconds(text: str) -> Fraction:
    """The duration as an exact fraction of seconds (for comparisons at a boundary)."""
    match = _match(text)
    return Fraction(match.group(1)) * UNIT_SECONDS[match.group(2)]


def format_duration(seconds: float) -> str:
    """Render seconds the way a person writes them (``1.5s``, ``250ms``, ``2m``)."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    if seconds >= 1:
        return f"{seconds:g}s"
    return f"{seconds * 1000:g}ms"


def to_seconds(value: Any) -> float:
    """``parse_duration`` for a field: a bare number (a YAML ``5``) is told it lacks a unit."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        # Bare numbers are ambiguous (seconds? ms?); the format asks for units.
        v = shown(value)
        # .nan, .inf, -5: say that first (an int past a float's range is simply large)
        wrong = number_problem(
            max(min(value, 1e308), -1e308) if isinstance(value, int) else value, v
        )
        if wrong is not None:
            raise ValueError(wrong)
        if len(v) > 20:
            msg = f"{v} has no unit; write a number with a unit, e.g. '30s' or '250ms'"
        else:
            msg = f"{v} has no unit; write it as e.g. '{v}s' or '{v}ms'"
        raise ValueError(msg)  # noqa: TRY004 - pydantic reports ValueError, not TypeError
    return parse_duration(value)


def at_most(maximum: str) -> Callable[[Any], float]:
    """``to_seconds`` that also refuses more than ``maximum`` (e.g. ``"168h"``).

    A value over it in a form the grammar refuses (``1e9s``) is called too large too:
    that is the first thing wrong with it.
    """
    ceiling = exact_seconds(maximum)

    def check(value: Any) -> float:
        loose = loose_seconds(value)
        if loose is not None and loose > ceiling:
            raise ValueError(f"{shown(value)} is too large: the maximum is {maximum}")
        seconds = to_seconds(value)
        if exact_seconds(value) > ceiling:
            raise ValueError(f"{shown(value)} is too large: the maximum is {maximum}")
        return seconds

    return check


LONGEST = "24h"  # no timeout, backoff or wait of a service is longer

Duration = Annotated[float, BeforeValidator(at_most(LONGEST))]
"""Seconds in Python, 0 to ``LONGEST``; a string with a unit in a service's config file."""

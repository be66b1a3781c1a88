"""Durations are strings with units in every user-facing file: ``250ms``, ``30s``, ``2m``.

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
from decimal import Decimal
from fractions import Fraction

UNIT_SECONDS: dict[str, Fraction] = {
    "us": Fraction(1, 1_000_000),
    "ms": Fraction(1, 1_000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}
_UNITS = {unit: float(seconds) for unit, seconds in UNIT_SECONDS.items()}
MAX_CHARS = 32

_LEAD = r"[ \t]*"
# Trailing white space may include line breaks: a YAML block scalar (``|``) ends with
# one. Python's ``$`` also matches before a final newline and ECMA's does not; a
# class that takes the newline itself makes both dialects agree.
_TRAIL = r"[ \t\n]*"
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_UNIT_ALTS = "us|ms|s|m|h"
PATTERN = f"^{_LEAD}({_NUMBER}){_LEAD}({_UNIT_ALTS}){_TRAIL}$"
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


# ------------------------------------------------------------ "at least" as a regex
# JSON Schema cannot compare a string with a unit to a minimum, but a regular
# expression can: per unit, the decimal numbers >= the minimum expressed in
# that unit. The expressions are built from exact fractions; a property test
# checks them against exact_seconds.


def pattern_at_least(minimum: Fraction) -> str:
    """A PATTERN-shaped regex matching exactly the durations >= ``minimum`` seconds."""
    branches = [
        f"(?:{_number_at_least(minimum / factor)}){_LEAD}{unit}"
        for unit, factor in UNIT_SECONDS.items()
    ]
    return f"^{_LEAD}(?:{'|'.join(branches)}){_TRAIL}$"


def pattern_at_most(maximum: Fraction) -> str:
    """A PATTERN-shaped regex matching exactly the durations <= ``maximum`` seconds.

    ``maximum`` must be a whole number in every unit (a whole number of hours): the
    regex then compares integer parts only.
    """
    branches = []
    for unit, factor in UNIT_SECONDS.items():
        bound = maximum / factor
        if bound.denominator != 1:
            raise ValueError(f"{maximum} s is not a whole number of {unit}")
        n = bound.numerator
        at_most = f"0*(?:{_integer_below(n)})(?:\\.[0-9]+)?|0*{n}(?:\\.0+)?"
        branches.append(f"(?:{at_most}){_LEAD}{unit}")
    return f"^{_LEAD}(?:{'|'.join(branches)}){_TRAIL}$"


def _integer_below(n: int) -> str:
    """Integers 0 <= i < n, written without leading zeros (n >= 1)."""
    s = str(n)
    alts = ["0"]
    if len(s) > 1:
        alts.append(f"[1-9][0-9]{{0,{len(s) - 2}}}")  # fewer digits
    for i, d in enumerate(s):  # as many digits, the first difference downward
        low = 1 if i == 0 else 0
        if int(d) > low:
            alts.append(f"{s[:i]}[{low}-{int(d) - 1}]{_digits(len(s) - i - 1)}")
    return "|".join(alts)


def _number_at_least(t: Fraction) -> str:
    """Decimal numbers (``12``, ``0.5``, leading zeros allowed) whose value is >= ``t`` >= 0."""
    n = t.numerator // t.denominator
    rest = t - n
    any_fraction = r"(?:\.[0-9]+)?"
    above = f"0*{_integer_above(n)}{any_fraction}"
    equal = "0+" if n == 0 else f"0*{n}"
    if rest == 0:
        return f"{above}|{equal}{any_fraction}"
    return f"{above}|{equal}\\.(?:{_fraction_at_least(rest)})"


def _integer_above(n: int) -> str:
    """Integers > n, written without leading zeros."""
    s = str(n)
    alts = [f"[1-9][0-9]{{{len(s)},}}"]  # more digits
    for i, d in enumerate(s):  # as many digits, the first difference upward
        if d != "9":
            alts.append(f"{s[:i]}[{int(d) + 1}-9]{_digits(len(s) - i - 1)}")
    return f"(?:{'|'.join(alts)})"


def _digits(count: int) -> str:
    return "" if count == 0 else "[0-9]" if count == 1 else f"[0-9]{{{count}}}"


def _fraction_at_least(r: Fraction) -> str:
    """Digit strings f (after the point) with 0.f >= r, for 0 < r < 1."""
    prefix, cycle = _expansion(r)
    alts = [f"{prefix[:i]}[{int(d) + 1}-9][0-9]*" for i, d in enumerate(prefix) if d != "9"]
    if not cycle:
        alts.append(f"{prefix}[0-9]*")  # equal to r, or r followed by more digits
    else:
        # A finite string never equals a repeating expansion; it is above r when
        # it leaves the expansion upward somewhere in the cycle.
        alts += [
            f"{prefix}(?:{cycle})*{cycle[:j]}[{int(d) + 1}-9][0-9]*"
            for j, d in enumerate(cycle)
            if d != "9"
        ]
    return "|".join(alts)


def _expansion(r: Fraction) -> tuple[str, str]:
    """The decimal digits of 0 < r < 1: a prefix and a repeating cycle ('' if it ends)."""
    digits: list[str] = []
    seen: dict[int, int] = {}
    num, den = r.numerator, r.denominator
    while num and num not in seen:
        seen[num] = len(digits)
        num *= 10
        digits.append(str(num // den))
        num %= den
    if not num:
        return "".join(digits), ""
    start = seen[num]
    return "".join(digits[:start]), "".join(digits[start:])

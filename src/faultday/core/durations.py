"""Durations in the harness: the one grammar (``faultday_wire.durations``) and its JSON Schema.

The grammar, its parser and its messages are ``faultday_wire.durations``, shared
with the reference stack's config files, so both sides read and refuse a
duration alike; they are imported from here by the harness. What only the
harness needs is written here: the JSON Schema's regular expressions for a
duration with a bound.
"""

from __future__ import annotations

from fractions import Fraction

from faultday_wire.durations import (
    BLANK,
    MAX_CHARS,
    PATTERN,
    TRAILING_BLANK,
    UNIT_SECONDS,
    UNITS_HINT,
    at_most,
    exact_seconds,
    format_duration,
    loose_seconds,
    number_problem,
    parse_duration,
    shown,
    to_seconds,
)

__all__ = [
    "MAX_CHARS",
    "PATTERN",
    "UNITS_HINT",
    "UNIT_SECONDS",
    "at_most",
    "exact_seconds",
    "format_duration",
    "loose_seconds",
    "number_problem",
    "parse_duration",
    "pattern_at_least",
    "pattern_at_most",
    "shown",
    "to_seconds",
]


# ------------------------------------------------------------ "at least" as a regex
# JSON Schema cannot compare a string with a unit to a minimum, but a regular
# expression can: per unit, the decimal numbers >= the minimum expressed in
# that unit. The expressions are built from exact fractions; a property test
# checks them against exact_seconds.


def pattern_at_least(minimum: Fraction) -> str:
    """A PATTERN-shaped regex matching exactly the durations >= ``minimum`` seconds."""
    branches = [
        f"(?:{_number_at_least(minimum / factor)}){BLANK}{unit}"
        for unit, factor in UNIT_SECONDS.items()
    ]
    return f"^{BLANK}(?:{'|'.join(branches)}){TRAILING_BLANK}$"


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
        branches.append(f"(?:{at_most}){BLANK}{unit}")
    return f"^{BLANK}(?:{'|'.join(branches)}){TRAILING_BLANK}$"


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

"""Field types shared by every model parsed from a user's file."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainSerializer, Strict, WithJsonSchema

from faultday.core import durations
from faultday.core.durations import (
    MAX_CHARS,
    PATTERN,
    exact_seconds,
    format_duration,
    pattern_at_least,
    pattern_at_most,
    shown,
    to_seconds,
)


def _a_number(value: Any) -> Any:
    # JSON Schema's "integer" takes 5 and 5.0 and never "5" or true; pydantic's lax int
    # takes all four. Refuse text and booleans first so the loader and the schema agree.
    if isinstance(value, str | bool):
        raise ValueError(f"expected a whole number, not {shown(value)}")  # noqa: TRY004
    return value


Int = Annotated[int, BeforeValidator(_a_number)]
"""A whole number: 5 or 5.0, never "5" or true."""


def whole(*, ge: int | None = None, le: int | None = None) -> Any:
    """An Int with bounds (``ge``, ``le``…) that stay in the JSON Schema inside ``X | None``.

    On ``Int | None = Field(ge=1)`` pydantic writes "ge" beside the union, a key no JSON
    Schema validator reads; bounds placed before the validator become "minimum".
    """
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_a_number)]


Number = Annotated[float, Strict()]
"""A number: 5 or 0.5, never "0.5" or true."""
Bool = Annotated[bool, Strict()]
"""true or false, never "yes" or 1."""


def _schema(pattern: str, description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": pattern,
        "maxLength": MAX_CHARS,
        "description": description,
    }


Duration = Annotated[
    float,
    BeforeValidator(to_seconds),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(_schema(PATTERN, "a duration with a unit: 250ms, 30s, 2m")),
]
"""Seconds in Python; a string with a unit in YAML, JSON and the schema."""


def at_most(maximum: str) -> BeforeValidator:
    """A Duration's validator that also refuses more than ``maximum`` (e.g. ``"168h"``).

    A value over it in a form the grammar refuses (``1e9s``) is called too large too:
    that is the first thing wrong with it. Use it with ``at_most_schema``:
    ``Annotated[float, at_most(M), AS_DURATION, at_most_schema(M)]``.
    """
    return BeforeValidator(durations.at_most(maximum))


def at_most_schema(maximum: str) -> WithJsonSchema:
    """The JSON Schema of a Duration of at most ``maximum`` (a whole number of hours)."""
    return WithJsonSchema(
        _schema(
            pattern_at_most(exact_seconds(maximum)), f"a duration with a unit, at most {maximum}"
        )
    )


AS_DURATION = PlainSerializer(format_duration, return_type=str)
"""How a Duration is written back: ``1.5s``, ``2m``."""


def duration_at_least(minimum: str) -> Any:
    """A Duration that must be >= ``minimum`` (e.g. ``"250ms"``), in the model and the schema.

    The comparison is exact (fractions, not floats), so the loader and the
    schema's pattern agree at the boundary too.
    """
    floor = exact_seconds(minimum)

    def at_least(value: Any) -> float:
        seconds = to_seconds(value)
        if exact_seconds(value) < floor:
            raise ValueError(f"{shown(value)} is too short: the minimum is {minimum}")
        return seconds

    return Annotated[
        float,
        BeforeValidator(at_least),
        PlainSerializer(format_duration, return_type=str),
        WithJsonSchema(
            _schema(pattern_at_least(floor), f"a duration with a unit, at least {minimum}")
        ),
    ]

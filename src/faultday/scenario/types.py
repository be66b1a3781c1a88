"""Field types shared by every model parsed from a user's file."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

from faultday.durations import format_duration, parse_duration


def _to_seconds(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        # Bare numbers are ambiguous (seconds? ms?); the format asks for units.
        msg = f"{value!r} has no unit; write it as e.g. '{value}s' or '{value}ms'"
        raise ValueError(msg)  # noqa: TRY004 - pydantic reports ValueError, not TypeError
    return parse_duration(value)


Duration = Annotated[
    float,
    BeforeValidator(_to_seconds),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^\s*\d+(\.\d+)?\s*(us|ms|s|m|h)\s*$",
            "description": "a duration with a unit: 250ms, 30s, 2m",
        }
    ),
]
"""Seconds in Python; a string with a unit in YAML, JSON and the schema."""

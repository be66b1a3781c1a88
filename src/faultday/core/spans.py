"""One span of a distributed trace, as the harness keeps it (docs/traces.md).

The trace collector decodes OTLP into these, the span store keeps them in the run
folder (``traces.db``), and the analysis reads them back. Times are Unix epoch
nanoseconds, as OTLP carries them; ids are lower-case hex, as W3C ``traceparent``
writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

# An attribute's value once flattened: OTLP's arrays and maps are kept as JSON text.
AttrValue = str | int | float | bool


class SpanKind(StrEnum):
    UNSPECIFIED = "unspecified"
    INTERNAL = "internal"
    SERVER = "server"
    CLIENT = "client"
    PRODUCER = "producer"
    CONSUMER = "consumer"


class SpanStatus(StrEnum):
    UNSET = "unset"
    OK = "ok"
    ERROR = "error"


_EMPTY: Mapping[str, AttrValue] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Span:
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str  # 16 hex digits; "" for a trace's root
    service: str  # the resource's service.name ("" when it gave none)
    name: str
    start_ns: int
    end_ns: int
    kind: SpanKind = SpanKind.INTERNAL
    status: SpanStatus = SpanStatus.UNSET
    status_message: str = ""
    # A factory: a mappingproxy is not hashable, so dataclasses refuses it as a plain default.
    attributes: Mapping[str, AttrValue] = field(default_factory=lambda: _EMPTY)

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9

    @property
    def hop(self) -> str:
        """Service and span name: what the analysis groups by."""
        return f"{self.service}/{self.name}"

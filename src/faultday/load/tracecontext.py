"""W3C trace context for the load's requests (docs/load.md, "Trace context").

Each request the load sends starts a trace (an agent task is one trace: its submit and
its polls) and says so in a ``traceparent`` header, version 00: a fresh random 16-byte
trace id and, per request, a fresh 8-byte parent id. A share of the traces is sampled
(flag 01); the rest carry flag 00 rather than no header, because a service that finds
no ``traceparent`` starts a trace of its own, which its default sampler
(OpenTelemetry's ``ParentBased(AlwaysOn)``) records, whereas flag 00 makes that
sampler record nothing and pass the 00 on, so the share holds end to end.

Ids and the decision come from the OpenTelemetry SDK (its ``RandomIdGenerator`` and
``TraceIdRatioBased``'s bound on the low 64 bits of the trace id), so a downstream
ratio sampler given the same share agrees trace by trace. Imported only by the
locustfile and by tests; the harness needs none of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

from faultday.core.loadconfig import TracePropagation

HEADER = "traceparent"
VERSION = "00"
SAMPLED = "01"
NOT_SAMPLED = "00"


@dataclass(frozen=True, slots=True)
class Trace:
    """One trace the load starts: its id (32 lower-case hex digits) and whether it is sampled."""

    trace_id: str
    sampled: bool
    ids: RandomIdGenerator

    def header(self) -> str:
        """A ``traceparent`` for one request of this trace, with a parent id of its own."""
        flags = SAMPLED if self.sampled else NOT_SAMPLED
        return f"{VERSION}-{self.trace_id}-{self.ids.generate_span_id():016x}-{flags}"


class TraceStarter:
    """Starts the load's traces; ``start()`` is None when the run sends no trace context."""

    def __init__(self, config: TracePropagation) -> None:
        self.enabled = config.enabled
        self._ids = RandomIdGenerator()
        # The ratio sampler's own rule: sampled when the trace id's low 64 bits are below it.
        self._bound = TraceIdRatioBased.get_bound_for_rate(config.sample)

    def start(self) -> Trace | None:
        if not self.enabled:
            return None
        trace_id = self._ids.generate_trace_id()
        sampled = trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < self._bound
        return Trace(f"{trace_id:032x}", sampled, self._ids)

"""Per-proxy counters: mutated by the proxy's event loop, read as frozen snapshots."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from pydantic import JsonValue


@dataclass(frozen=True, slots=True)
class ProxyCounters:
    """What the checks need from one proxy, at one instant."""

    proxy: str
    connections_total: int
    connections_active: int
    bytes_received_upstream: int  # read from clients
    bytes_sent_upstream: int  # written to the upstream server
    bytes_received_downstream: int  # read from the upstream server
    bytes_sent_downstream: int  # written to clients
    http_requests: int
    http_responses: tuple[tuple[int, int], ...]  # (status, count), sorted
    toxic_actions: tuple[tuple[str, int], ...]  # (toxic type, times it acted), sorted
    # Client connections whose upstream could not be reached (refused, timed out):
    # attempts that never became a request the server saw, e.g. retries at a dead replica.
    upstream_failures: int = 0

    def responses(self, status: int) -> int:
        return dict(self.http_responses).get(status, 0)

    def responses_in(self, low: int, high: int) -> int:
        """Responses with ``low <= status <= high`` (e.g. 500, 599)."""
        return sum(n for s, n in self.http_responses if low <= s <= high)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "proxy": self.proxy,
            "connections_total": self.connections_total,
            "connections_active": self.connections_active,
            "bytes_received_upstream": self.bytes_received_upstream,
            "bytes_sent_upstream": self.bytes_sent_upstream,
            "bytes_received_downstream": self.bytes_received_downstream,
            "bytes_sent_downstream": self.bytes_sent_downstream,
            "http_requests": self.http_requests,
            "http_responses": {str(s): n for s, n in self.http_responses},
            "toxic_actions": dict(self.toxic_actions),
            "upstream_failures": self.upstream_failures,
        }


@dataclass(slots=True)
class LiveCounters:
    """The mutable side; only the proxy's event-loop thread writes it."""

    connections_total: int = 0
    connections_active: int = 0
    # Index 0 = upstream direction (client -> server), 1 = downstream.
    received: list[int] = field(default_factory=lambda: [0, 0])
    sent: list[int] = field(default_factory=lambda: [0, 0])
    http_requests: int = 0
    http_responses: dict[int, int] = field(default_factory=dict)
    toxic_actions: dict[str, int] = field(default_factory=dict)
    upstream_failures: int = 0
    # The native relay's: bytes received up, sent up, received down, sent down, and
    # connections it closed. Only its thread writes them; aligned 64-bit reads are
    # never torn. ``connections_active`` counts every accepted connection until Python
    # closes it, so the ones the relay closed are taken off at snapshot time.
    native: ctypes.Array[ctypes.c_uint64] | None = None

    def response(self, status: int) -> None:
        self.http_responses[status] = self.http_responses.get(status, 0) + 1

    def acted(self, toxic_type: str) -> None:
        self.toxic_actions[toxic_type] = self.toxic_actions.get(toxic_type, 0) + 1

    def open(self) -> int:
        """Connections open now, in Python and in the native relay (none: nothing to take back)."""
        return self.connections_active - (self.native[4] if self.native is not None else 0)

    def snapshot(self, proxy: str) -> ProxyCounters:
        # Readers in other threads: ints and dict copies are atomic under the GIL,
        # so a snapshot is consistent per field without locking the hot path.
        n = tuple(self.native) if self.native is not None else (0, 0, 0, 0, 0)
        return ProxyCounters(
            proxy=proxy,
            connections_total=self.connections_total,
            connections_active=self.connections_active - n[4],
            bytes_received_upstream=self.received[0] + n[0],
            bytes_sent_upstream=self.sent[0] + n[1],
            bytes_received_downstream=self.received[1] + n[2],
            bytes_sent_downstream=self.sent[1] + n[3],
            http_requests=self.http_requests,
            http_responses=tuple(sorted(dict(self.http_responses).items())),
            toxic_actions=tuple(sorted(dict(self.toxic_actions).items())),
            upstream_failures=self.upstream_failures,
        )

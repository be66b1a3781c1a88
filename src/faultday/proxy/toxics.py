"""Toxics as the proxy holds them, and each connection's view of one (its link)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace

from pydantic import BaseModel, JsonValue

from faultday.proxy.models import (
    HTTP_TYPES,
    SSE_TYPES,
    BandwidthAttrs,
    HttpErrorAttrs,
    LatencyAttrs,
    LimitDataAttrs,
    SlicerAttrs,
    Stream,
    TimeoutAttrs,
    ToxicSpec,
    dump_attributes,
)
from faultday.proxy.native import Timing
from faultday.proxy.tracing import ToxicView, describe_toxic

TCP_TYPES = frozenset(
    {"latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer", "limit_data", "noop"}
)
# What the native relay applies itself (at most one toxic of each type per direction).
NATIVE_TYPES = frozenset({"latency", "bandwidth", "slicer", "limit_data", "timeout", "noop"})


class Toxic:
    """One toxic on one proxy. Mutable in place (``POST .../toxics/{name}`` updates it)."""

    def __init__(self, spec: ToxicSpec, attrs: BaseModel) -> None:
        self.name = spec.resolved_name()
        self.type = spec.type
        self.stream = spec.stream
        self.toxicity = spec.toxicity
        self.attrs = attrs
        self.active = True
        self.created = time.monotonic()
        self.hits = 0  # requests or streams acted on, for first_n
        self._view: tuple[BaseModel, ToxicView] | None = None

    def view(self) -> ToxicView:
        """How a request's span shows this toxic (rebuilt only when its attributes change)."""
        cached = self._view
        if cached is None or cached[0] is not self.attrs:
            cached = self._view = (self.attrs, describe_toxic(self.type, self.stream, self.attrs))
        return cached[1]

    @property
    def is_tcp(self) -> bool:
        return self.type in TCP_TYPES

    @property
    def is_http(self) -> bool:
        return self.type in HTTP_TYPES

    @property
    def is_sse(self) -> bool:
        return self.type in SSE_TYPES

    def within_limits(self, now: float) -> bool:
        """first_n / limit_time of faultday's HTTP and SSE toxics."""
        first_n = getattr(self.attrs, "first_n", 0)
        limit_time = getattr(self.attrs, "limit_time", 0)
        if first_n and self.hits >= first_n:
            return False
        return not (limit_time and (now - self.created) * 1000.0 >= limit_time)

    def take(self, now: float) -> bool:
        """Decide one request/stream: within limits (and rate for http_error); counts a hit."""
        if not self.within_limits(now):
            return False
        if isinstance(self.attrs, HttpErrorAttrs) and random.random() >= self.attrs.rate:  # noqa: S311
            return False
        self.hits += 1
        return True

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream.value,
            "toxicity": self.toxicity,
            "attributes": dump_attributes(self.attrs),
        }


@dataclass(slots=True)
class Link:
    """A toxic as one connection sees it: toxicity rolled once, timers from attach time."""

    toxic: Toxic
    enabled: bool
    attached: float = field(default_factory=time.monotonic)
    passed: int = 0  # limit_data: bytes let through so far

    @classmethod
    def roll(cls, toxic: Toxic) -> Link:
        # Toxiproxy decides toxicity once per connection, not per chunk.
        return cls(toxic, toxic.toxicity >= 1.0 or random.random() < toxic.toxicity)  # noqa: S311

    @property
    def live(self) -> bool:
        return self.enabled and self.toxic.active


def applies(toxic: Toxic, stream: Stream, *, http: bool) -> bool:
    """Does ``toxic`` act on this direction of a connection (HTTP or not)?"""
    if toxic.is_tcp:
        return toxic.stream is stream
    if not http:
        return False
    # Request-level toxics act on requests, stream toxics on responses, whatever
    # ``stream`` says: the HTTP direction is implied by the toxic's meaning.
    return stream is (Stream.UPSTREAM if toxic.is_http else Stream.DOWNSTREAM)


def slice_sizes(n: int, average: int, variation: int) -> list[int]:
    """The slicer's pieces of an ``n``-byte chunk, as Toxiproxy 2.12 cuts them.

    A span longer than ``average + variation`` is halved, the cut moved by
    ``[-variation, variation)``, and each half cut again (relay.c does the same,
    one piece at a time). A cut is kept inside the span: Toxiproxy's would make an
    empty or negative piece there, and panic.
    """
    out: list[int] = []
    spans = [(0, n)]
    while spans:
        start, end = spans.pop()
        while end - start - average > variation and end - start > 1:
            mid = start + (end - start) // 2
            if variation:
                mid += random.randrange(2 * variation) - variation  # noqa: S311
            mid = min(max(mid, start + 1), end - 1)
            spans.append((mid, end))
            end = mid
        out.append(end - start)
    return out


def relays_natively(chain: list[Link]) -> bool:
    """Can the native relay apply this direction's toxics (as ``native_timing`` says)?"""
    types = [lk.toxic.type for lk in chain if lk.live]
    return all(t in NATIVE_TYPES for t in types) and len(types) == len(set(types))


def native_timing(chain: list[Link]) -> Timing | None:
    """The native relay's parameters for a direction ``relays_natively``; None: no toxic acts."""
    timing: Timing | None = None
    seen_latency = False
    for link in chain:
        attrs = link.toxic.attrs
        if not link.live:
            continue
        t = timing or Timing()
        if isinstance(attrs, LatencyAttrs):
            seen_latency = True
            timing = replace(t, latency_ms=attrs.latency, jitter_ms=attrs.jitter)
        elif isinstance(attrs, BandwidthAttrs) and attrs.rate > 0:  # 0 = unlimited
            timing = replace(t, rate_kbps=attrs.rate, latency_first=seen_latency)
        elif isinstance(attrs, SlicerAttrs) and attrs.average_size > 0:  # 0: passes all
            timing = replace(
                t,
                slice_average=attrs.average_size,
                slice_variation=attrs.size_variation,
                slice_delay_us=attrs.delay,
            )
        elif isinstance(attrs, LimitDataAttrs):
            timing = replace(t, limit=limit_left(link))
        elif isinstance(attrs, TimeoutAttrs):
            close_at = link.attached + attrs.timeout / 1000.0 if attrs.timeout > 0 else 0.0
            timing = replace(t, hold=True, close_at=close_at)
    return timing


def limit_link(chain: list[Link]) -> Link | None:
    """The live limit_data toxic of a direction (``relays_natively``: one at most)."""
    return next(
        (lk for lk in chain if lk.live and isinstance(lk.toxic.attrs, LimitDataAttrs)), None
    )


def limit_left(link: Link) -> int:
    """The bytes a limit_data link still lets through."""
    attrs = link.toxic.attrs
    assert isinstance(attrs, LimitDataAttrs)
    return max(0, attrs.bytes - link.passed)

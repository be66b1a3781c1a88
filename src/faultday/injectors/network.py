"""Network faults on a proxied edge, through any Toxiproxy-API server.

Every injector here acts through the edge primitive (``injectors.edge``) on the
edge's ``proxy_api`` (faultday's proxy or a real toxiproxy-server). A toxic's
name is fixed in ``prepare`` — ``faultday-<fault>-<type>`` — so the revert in
the ledger names exactly what inject will create, before it exists.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from faultday.core.targets import Revert, Target, TargetKind
from faultday.core.types import Duration
from faultday.injectors import edge
from faultday.injectors.base import FaultContext, Injector
from faultday.injectors.edge import EDGE, REMOVE_TOXICS, EdgeData, EdgeOutage

StreamName = Literal["downstream", "upstream", "both"]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _TcpParams(_Params):
    stream: StreamName = Field(
        default="downstream", description="downstream = server→client, upstream, or both"
    )
    toxicity: float = Field(default=1.0, ge=0.0, le=1.0, description="share of connections hit")


class LatencyParams(_TcpParams):
    latency: Duration = Field(description="added to every chunk, e.g. 200ms")
    jitter: Duration = Field(default=0.0, description="± uniform, e.g. 20ms")


class ResetParams(_TcpParams):
    after: Duration = Field(
        default=0.0,
        description="RST a connection this long after data first reaches the fault "
        "(Toxiproxy's reset_peer: idle connections are left alone; what arrived is dropped)",
    )


class TimeoutParams(_TcpParams):
    after: Duration = Field(default=0.0, description="close after this long; 0s = hold forever")


class BandwidthParams(_TcpParams):
    rate: int = Field(ge=1, description="KB/s")


class SlicerParams(_TcpParams):
    average_size: int = Field(default=64, ge=1, description="bytes per slice")
    size_variation: int = Field(default=0, ge=0, description="± bytes")
    delay: Duration = Field(default=0.001, description="between slices, e.g. 5ms")


class LimitDataParams(_TcpParams):
    bytes: int = Field(ge=0, description="close a connection after this many bytes")


class _Limited(_Params):
    first_n: int = Field(default=0, ge=0, description="only the first N requests/streams; 0 = all")
    limit_time: Duration = Field(default=0.0, description="stop acting after this long; 0s = never")
    toxicity: float = Field(default=1.0, ge=0.0, le=1.0, description="share of connections hit")


class HttpErrorParams(_Limited):
    status: int = Field(default=503, ge=400, le=599)
    retry_after: Duration | None = Field(default=None, description="Retry-After header")
    body: str = ""
    content_type: str = "application/json"
    rate: float = Field(default=1.0, ge=0.0, le=1.0, description="share of requests answered")


class HttpLatencyParams(_Limited):
    latency: Duration = Field(description="added before each request, e.g. 500ms")
    jitter: Duration = 0.0


class StreamCutParams(_Limited):
    after_events: int = Field(default=0, ge=0, description="SSE events let through first")
    mode: Literal["reset", "close"] = "reset"


class StreamStallParams(_Limited):
    after_events: int = Field(default=0, ge=0)
    stall: Duration = Field(default=0.0, description="how long; 0s = until the fault ends")


class StreamDripParams(_Limited):
    interval: Duration = Field(description="one event every interval, e.g. 200ms")


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


TP = TypeVar("TP", bound=_Params)
TcpP = TypeVar("TcpP", bound=_TcpParams)
HttpP = TypeVar("HttpP", bound=_Limited)


class ToxicInjector(Injector[TP, EdgeData]):
    """Base of the toxic-backed injectors: one toxic per stream, removed on revert."""

    toxic_type: ClassVar[str]
    target_kinds: ClassVar[frozenset[TargetKind]] = EDGE
    Data = EdgeData

    @abstractmethod
    def attributes(self, params: TP) -> dict[str, JsonValue]:
        """The toxic's attributes, as the Toxiproxy API takes them."""

    @abstractmethod
    def _streams(self, params: TP) -> list[str]:
        """The streams that get a toxic each."""

    @abstractmethod
    def _toxicity(self, params: TP) -> float:
        """The share of connections hit."""

    def toxic_names(self, fault: str, params: TP) -> list[str]:
        base = f"faultday-{fault}-{self.toxic_type}"
        streams = self._streams(params)
        return [base] if len(streams) == 1 else [f"{base}-{s}" for s in streams]

    def prepare(self, ctx: FaultContext, target: Target, params: TP, *, fault: str) -> Revert:
        data = EdgeData.for_target(target, toxics=self.toxic_names(fault, params))
        return self.record(target, fault=fault, action=REMOVE_TOXICS, data=data)

    def inject(self, ctx: FaultContext, target: Target, params: TP, revert: Revert) -> None:
        edge.add_toxics(
            self.data(revert),
            toxic_type=self.toxic_type,
            streams=self._streams(params),
            toxicity=self._toxicity(params),
            attributes=self.attributes(params),
            target=target.name,
        )

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        edge.remove_toxics(self.data(revert), target=revert.target)


class TcpToxicInjector(ToxicInjector[TcpP]):
    """A TCP toxic: on one stream or both, for a share of the connections."""

    def _streams(self, params: TcpP) -> list[str]:
        return ["downstream", "upstream"] if params.stream == "both" else [params.stream]

    def _toxicity(self, params: TcpP) -> float:
        return params.toxicity


class HttpToxicInjector(ToxicInjector[HttpP]):
    """An HTTP or SSE toxic: it acts on the answers (downstream)."""

    def _streams(self, params: HttpP) -> list[str]:
        return ["downstream"]

    def _toxicity(self, params: HttpP) -> float:
        return params.toxicity


class Latency(TcpToxicInjector[LatencyParams]):
    """Add latency (± jitter) to every chunk on a proxied edge."""

    name: ClassVar[str] = "latency"
    summary: ClassVar[str] = "added latency (± jitter) on an edge, per chunk"
    toxic_type: ClassVar[str] = "latency"
    Params = LatencyParams

    def attributes(self, params: LatencyParams) -> dict[str, JsonValue]:
        return {"latency": _ms(params.latency), "jitter": _ms(params.jitter)}


class Reset(TcpToxicInjector[ResetParams]):
    """Reset (TCP RST) the connections that carry data on an edge, at once or after a delay."""

    name: ClassVar[str] = "reset"
    summary: ClassVar[str] = "TCP RST on an edge's connections (ECONNRESET)"
    toxic_type: ClassVar[str] = "reset_peer"
    Params = ResetParams

    def attributes(self, params: ResetParams) -> dict[str, JsonValue]:
        return {"timeout": _ms(params.after)}


class Timeout(TcpToxicInjector[TimeoutParams]):
    """Black-hole an edge: no data passes; close after ``after`` (0s = never)."""

    name: ClassVar[str] = "timeout"
    summary: ClassVar[str] = "nothing passes on an edge; optionally closed after a while"
    toxic_type: ClassVar[str] = "timeout"
    Params = TimeoutParams

    def attributes(self, params: TimeoutParams) -> dict[str, JsonValue]:
        return {"timeout": _ms(params.after)}


class Bandwidth(TcpToxicInjector[BandwidthParams]):
    """Limit an edge's throughput to ``rate`` KB/s."""

    name: ClassVar[str] = "bandwidth"
    summary: ClassVar[str] = "throughput cap on an edge (KB/s)"
    toxic_type: ClassVar[str] = "bandwidth"
    Params = BandwidthParams

    def attributes(self, params: BandwidthParams) -> dict[str, JsonValue]:
        return {"rate": params.rate}


class Slicer(TcpToxicInjector[SlicerParams]):
    """Slice data into small delayed pieces (partial reads, Nagle-like stalls)."""

    name: ClassVar[str] = "slicer"
    summary: ClassVar[str] = "data in small delayed slices"
    toxic_type: ClassVar[str] = "slicer"
    Params = SlicerParams

    def attributes(self, params: SlicerParams) -> dict[str, JsonValue]:
        return {
            "average_size": params.average_size,
            "size_variation": params.size_variation,
            "delay": round(params.delay * 1e6),
        }


class LimitData(TcpToxicInjector[LimitDataParams]):
    """Close each connection after it carried ``bytes`` bytes."""

    name: ClassVar[str] = "limit_data"
    summary: ClassVar[str] = "connections cut after N bytes"
    toxic_type: ClassVar[str] = "limit_data"
    Params = LimitDataParams

    def attributes(self, params: LimitDataParams) -> dict[str, JsonValue]:
        return {"bytes": params.bytes}


def _limits(params: _Limited) -> dict[str, JsonValue]:
    return {"first_n": params.first_n, "limit_time": _ms(params.limit_time)}


class HttpError(HttpToxicInjector[HttpErrorParams]):
    """Answer requests with status N (and Retry-After) instead of the upstream."""

    name: ClassVar[str] = "http_error"
    summary: ClassVar[str] = "HTTP status N (+ Retry-After) for a share or the first N requests"
    toxic_type: ClassVar[str] = "http_error"
    Params = HttpErrorParams

    def attributes(self, params: HttpErrorParams) -> dict[str, JsonValue]:
        retry = -1 if params.retry_after is None else round(params.retry_after)
        return {
            "status": params.status,
            "retry_after": retry,
            "body": params.body,
            "content_type": params.content_type,
            "rate": params.rate,
            **_limits(params),
        }


class HttpLatency(HttpToxicInjector[HttpLatencyParams]):
    """Delay each HTTP request (not each chunk) on a keep-alive edge."""

    name: ClassVar[str] = "http_latency"
    summary: ClassVar[str] = "latency per HTTP request"
    toxic_type: ClassVar[str] = "http_latency"
    Params = HttpLatencyParams

    def attributes(self, params: HttpLatencyParams) -> dict[str, JsonValue]:
        return {"latency": _ms(params.latency), "jitter": _ms(params.jitter), **_limits(params)}


class StreamCut(HttpToxicInjector[StreamCutParams]):
    """Cut token streams (SSE) after N events: RST or a clean close."""

    name: ClassVar[str] = "stream_cut"
    summary: ClassVar[str] = "cut SSE token streams after N events"
    toxic_type: ClassVar[str] = "stream_cut"
    Params = StreamCutParams

    def attributes(self, params: StreamCutParams) -> dict[str, JsonValue]:
        return {"after_events": params.after_events, "mode": params.mode, **_limits(params)}


class StreamStall(HttpToxicInjector[StreamStallParams]):
    """Hold token streams after N events for a while (or until the fault ends)."""

    name: ClassVar[str] = "stream_stall"
    summary: ClassVar[str] = "stall SSE token streams after N events"
    toxic_type: ClassVar[str] = "stream_stall"
    Params = StreamStallParams

    def attributes(self, params: StreamStallParams) -> dict[str, JsonValue]:
        return {"after_events": params.after_events, "stall": _ms(params.stall), **_limits(params)}


class StreamDrip(HttpToxicInjector[StreamDripParams]):
    """Release token stream events one every interval (a slow generator)."""

    name: ClassVar[str] = "stream_drip"
    summary: ClassVar[str] = "one SSE event every interval"
    toxic_type: ClassVar[str] = "stream_drip"
    Params = StreamDripParams

    def attributes(self, params: StreamDripParams) -> dict[str, JsonValue]:
        return {"interval": _ms(params.interval), **_limits(params)}


class Outage(EdgeOutage):
    """Take an edge down: the proxy refuses connections and closes open ones."""

    name: ClassVar[str] = "outage"
    summary: ClassVar[str] = "edge down (proxy disabled): refused and closed connections"

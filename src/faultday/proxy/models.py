"""Toxiproxy 2.x API shapes: proxies, toxics and each toxic type's attributes.

Toxiproxy's own toxic types ignore unknown attributes (Go's JSON decoding does,
and clients rely on it); faultday's HTTP/SSE types forbid them, so a typo in a
scenario fails loudly instead of silently injecting nothing.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

M = TypeVar("M", bound=BaseModel)

TOXIPROXY_VERSION = "2.12.0"
DEFAULT_LISTEN = "127.0.0.1:0"

# RFC 9110 media-type (visible ASCII only): an attribute that becomes a header value
# must not carry CR/LF (header injection) or anything a client would misparse.
_TCHARS = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[\t \x21\x23-\x5b\x5d-\x7e]|\\[\t \x21-\x7e])*"'
MEDIA_TYPE = re.compile(
    rf"{_TCHARS}/{_TCHARS}(?:[ \t]*;[ \t]*(?:{_TCHARS}=(?:{_TCHARS}|{_QUOTED}))?)*"
)


class Stream(StrEnum):
    UPSTREAM = "upstream"  # client -> server
    DOWNSTREAM = "downstream"  # server -> client


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LatencyAttrs(_Lenient):
    latency: int = Field(default=0, ge=0, description="ms added to each chunk")
    jitter: int = Field(default=0, ge=0, description="± ms, uniform")


class BandwidthAttrs(_Lenient):
    rate: int = Field(default=0, ge=0, description="KB/s; 0 = unlimited (as Toxiproxy)")


class SlowCloseAttrs(_Lenient):
    delay: int = Field(default=0, ge=0, description="ms before the close is passed on")


class TimeoutAttrs(_Lenient):
    timeout: int = Field(default=0, ge=0, description="ms; 0 = hold data, never close")


class ResetPeerAttrs(_Lenient):
    timeout: int = Field(default=0, ge=0, description="ms until the RST")


class SlicerAttrs(_Lenient):
    average_size: int = Field(default=0, ge=0)
    size_variation: int = Field(default=0, ge=0)
    delay: int = Field(default=0, ge=0, description="µs between slices")


class LimitDataAttrs(_Lenient):
    bytes: int = Field(default=0, ge=0)


class NoopAttrs(_Lenient):
    pass


class _Limited(_Strict):
    """Count- and time-limited variants shared by every faultday HTTP/SSE toxic."""

    first_n: int = Field(default=0, ge=0, description="act on the first N only; 0 = all")
    limit_time: int = Field(default=0, ge=0, description="ms the toxic acts after creation; 0 = ∞")


class HttpErrorAttrs(_Limited):
    status: int = Field(default=503, ge=100, le=599)
    retry_after: int = Field(default=-1, ge=-1, description="seconds; -1 = no header")
    body: str = ""
    content_type: str = "application/json"
    rate: float = Field(default=1.0, ge=0.0, le=1.0, description="fraction of requests hit")

    @field_validator("content_type")
    @classmethod
    def _media_type(cls, value: str) -> str:
        # It is written into the injected response's Content-Type header verbatim.
        if not MEDIA_TYPE.fullmatch(value):
            raise ValueError(f"{value!r} is not a media type (type/subtype[; name=value])")
        return value


class HttpLatencyAttrs(_Limited):
    latency: int = Field(default=0, ge=0, description="ms added before each request")
    jitter: int = Field(default=0, ge=0)


class StreamCutAttrs(_Limited):
    after_events: int = Field(default=0, ge=0)
    mode: Literal["reset", "close"] = "reset"


class StreamStallAttrs(_Limited):
    after_events: int = Field(default=0, ge=0)
    stall: int = Field(default=0, ge=0, description="ms; 0 = until the toxic is removed")


class StreamDripAttrs(_Limited):
    interval: int = Field(default=100, ge=0, description="ms between events")


ATTRS: dict[str, type[BaseModel]] = {
    "latency": LatencyAttrs,
    "bandwidth": BandwidthAttrs,
    "slow_close": SlowCloseAttrs,
    "timeout": TimeoutAttrs,
    "reset_peer": ResetPeerAttrs,
    "slicer": SlicerAttrs,
    "limit_data": LimitDataAttrs,
    "noop": NoopAttrs,
    "http_error": HttpErrorAttrs,
    "http_latency": HttpLatencyAttrs,
    "stream_cut": StreamCutAttrs,
    "stream_stall": StreamStallAttrs,
    "stream_drip": StreamDripAttrs,
}
HTTP_TYPES = frozenset({"http_error", "http_latency"})
SSE_TYPES = frozenset({"stream_cut", "stream_stall", "stream_drip"})


class ToxicSpec(_Lenient):
    """A toxic as POSTed to ``/proxies/{name}/toxics`` (defaults as Toxiproxy's)."""

    name: str = ""
    type: str
    stream: Stream = Stream.DOWNSTREAM
    toxicity: float = Field(default=1.0, ge=0.0, le=1.0)
    # Toxiproxy's Go client sends ``"attributes": null`` for a toxic without any:
    # null means every attribute at its default.
    attributes: dict[str, object] | None = None

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in ATTRS:
            raise ValueError(f"unknown toxic type {value!r}; valid: {', '.join(sorted(ATTRS))}")
        return value

    def resolved_name(self) -> str:
        return self.name or f"{self.type}_{self.stream.value}"

    def parsed_attributes(self) -> BaseModel:
        return validate(ATTRS[self.type], self.attributes or {})


class ProxySpec(_Lenient):
    """A proxy as POSTed to ``/proxies`` or ``/populate``."""

    name: str = Field(min_length=1)
    upstream: str = Field(min_length=1)
    # Toxiproxy listens on every interface for an empty listen; faultday on loopback.
    listen: str = DEFAULT_LISTEN
    enabled: bool = True

    @field_validator("listen")
    @classmethod
    def _default_listen(cls, value: str) -> str:
        return value or DEFAULT_LISTEN


class ProxyUpdate(_Lenient):
    """``POST /proxies/{name}``: any of these may be changed in place."""

    upstream: str | None = None
    listen: str | None = None
    enabled: bool | None = None


def split_hostport(value: str) -> tuple[str, int]:
    """``host:port`` → (host, port); ``:8080`` means all interfaces, as in Go."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{value!r} is not host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def validate(model: type[M], data: object) -> M:
    """``model.model_validate(data)``, straight to pydantic-core (half the time per call)."""
    validated: M = model.__pydantic_validator__.validate_python(data)
    return validated


def dump_attributes(attrs: BaseModel) -> dict[str, JsonValue]:
    """A toxic's attributes as JSON values: ``attrs.model_dump(mode="json")``, by its serializer.

    Straight to pydantic-core: ``model_dump`` spends ~2 µs in Python on its options
    first, on every toxic the API answers with.
    """
    dumped: dict[str, JsonValue] = attrs.__pydantic_serializer__.to_python(attrs, mode="json")
    return dumped


def validation_message(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in exc.errors()
    )

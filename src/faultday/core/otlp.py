"""OTLP/HTTP trace export bodies ↔ :class:`~faultday.core.spans.Span` (docs/traces.md).

:func:`decode` reads what an OpenTelemetry SDK POSTs to ``/v1/traces``: an
``ExportTraceServiceRequest`` as protobuf (``application/x-protobuf``) or as OTLP/JSON
(``application/json``), optionally gzip-compressed. Parsing is the official generated
protobuf classes' (``opentelemetry-proto``); only the two places where OTLP/JSON differs
from protobuf's own JSON mapping are handled here. Every size is bounded, and anything
malformed raises :class:`OtlpError` (too big: :class:`OtlpTooLarge`), never another
exception.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Status
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from faultday.core.spans import AttrValue, Span, SpanKind, SpanStatus
from faultday.errors import FaultdayError

__all__ = [
    "CONTENT_JSON",
    "CONTENT_PROTOBUF",
    "MAX_BODY",
    "MAX_DECODED",
    "TRACES_PATH",
    "OtlpError",
    "OtlpTooLarge",
    "decode",
    "encode",
]

TRACES_PATH: Final = "/v1/traces"  # OTLP/HTTP's path for traces
CONTENT_PROTOBUF: Final = "application/x-protobuf"
CONTENT_JSON: Final = "application/json"
MAX_BODY: Final = 4 * 1024 * 1024  # bytes as received (compressed or not)
MAX_DECODED: Final = 16 * 1024 * 1024  # bytes once gunzipped: a gzip bomb stops here
_MAX_GZIP_MEMBERS: Final = 64

_KINDS: Final[Mapping[int, SpanKind]] = {
    PbSpan.SPAN_KIND_UNSPECIFIED: SpanKind.UNSPECIFIED,
    PbSpan.SPAN_KIND_INTERNAL: SpanKind.INTERNAL,
    PbSpan.SPAN_KIND_SERVER: SpanKind.SERVER,
    PbSpan.SPAN_KIND_CLIENT: SpanKind.CLIENT,
    PbSpan.SPAN_KIND_PRODUCER: SpanKind.PRODUCER,
    PbSpan.SPAN_KIND_CONSUMER: SpanKind.CONSUMER,
}
_PB_KINDS: Final[Mapping[SpanKind, int]] = {v: k for k, v in _KINDS.items()}
_STATUSES: Final[Mapping[int, SpanStatus]] = {
    Status.STATUS_CODE_UNSET: SpanStatus.UNSET,
    Status.STATUS_CODE_OK: SpanStatus.OK,
    Status.STATUS_CODE_ERROR: SpanStatus.ERROR,
}
_PB_STATUSES: Final[Mapping[SpanStatus, int]] = {v: k for k, v in _STATUSES.items()}
_MAX_REASON: Final = 300
_MAX_NS: Final = 2**63 - 1
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16


class OtlpError(FaultdayError):
    """An export body that is not a valid OTLP trace request; ``reason`` says why, briefly."""

    def __init__(self, reason: str) -> None:
        # Short: it goes back to the sender in a 400 and into the collector's log.
        short = reason if len(reason) <= _MAX_REASON else reason[: _MAX_REASON - 1] + "…"
        super().__init__(short)
        self.reason = short


class OtlpTooLarge(OtlpError):
    """The body, or what it decompresses to, is over its limit."""


def decode(
    body: bytes,
    *,
    content_type: str,
    content_encoding: str = "",
    max_body: int = MAX_BODY,
    max_decoded: int = MAX_DECODED,
) -> list[Span]:
    """The spans of one OTLP/HTTP export body; OtlpError when malformed, OtlpTooLarge when big."""
    if len(body) > max_body:
        raise OtlpTooLarge(f"body of {len(body)} bytes is over the limit of {max_body}")
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        body = _gunzip(body, limit=max_decoded)
    elif encoding not in ("", "identity"):
        raise OtlpError(f"unsupported Content-Encoding {content_encoding!r} (gzip or none)")
    elif len(body) > max_decoded:
        raise OtlpTooLarge(f"body of {len(body)} bytes is over the limit of {max_decoded}")
    media = content_type.split(";", 1)[0].strip().lower()
    if media == CONTENT_PROTOBUF:
        request = _parse_protobuf(body)
    elif media == CONTENT_JSON:
        request = _parse_json(body)
    else:
        raise OtlpError(f"unsupported Content-Type {content_type!r}")
    return [span for rs in request.resource_spans for span in _resource_spans(rs)]


def encode(spans: Iterable[Span], service: str) -> bytes:
    """One ``ExportTraceServiceRequest`` (protobuf bytes) carrying ``spans`` as ``service``."""
    scope = ScopeSpans(spans=[_pb_span(s) for s in spans])
    resource = Resource(
        attributes=[KeyValue(key="service.name", value=AnyValue(string_value=service))]
    )
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[scope])]
    )
    data: bytes = request.SerializeToString()
    return data


# -- reading ------------------------------------------------------------------------


def _gunzip(body: bytes, *, limit: int) -> bytes:
    """Decompress at most ``limit + 1`` bytes: a gzip bomb never reaches memory whole."""
    out = bytearray()
    data = body
    for _ in range(_MAX_GZIP_MEMBERS):  # a gzip file may hold several members
        d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(data, limit + 1 - len(out))
        except zlib.error as exc:
            raise OtlpError(f"not valid gzip: {exc}") from exc
        if len(out) > limit:
            raise OtlpTooLarge(f"body decompresses to over the limit of {limit} bytes")
        if not d.eof:
            raise OtlpError("gzip stream is truncated")
        data = d.unused_data
        if not data:
            return bytes(out)
    raise OtlpError(f"more than {_MAX_GZIP_MEMBERS} gzip members")


def _parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise OtlpError(f"not an OTLP protobuf trace request: {exc}") from exc
    return request


def _parse_json(body: bytes) -> ExportTraceServiceRequest:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise OtlpError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise OtlpError("an OTLP/JSON request is a JSON object")
    _hex_ids_to_base64(doc)
    request = ExportTraceServiceRequest()
    try:
        # Unknown fields are ignored, as the OTLP spec asks of receivers. Enums may be
        # names or integers (OTLP/JSON writes integers): json_format accepts both.
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, ValueError, TypeError) as exc:
        raise OtlpError(f"not an OTLP/JSON trace request: {exc}") from exc
    return request


def _hex_ids_to_base64(doc: dict[str, object]) -> None:
    """OTLP/JSON writes trace and span ids as hex (the spec's one exception to protobuf's
    JSON mapping, which writes ``bytes`` as base64 and is what ``json_format`` parses), so
    the ids are rewritten in place to base64 before parsing; a non-hex id is an error."""
    for rs in _objects(doc.get("resourceSpans")):
        for ss in _objects(rs.get("scopeSpans")):
            for span in _objects(ss.get("spans")):
                _rewrite(span, ("traceId", "spanId", "parentSpanId"))
                for link in _objects(span.get("links")):
                    _rewrite(link, ("traceId", "spanId"))


def _objects(value: object) -> list[dict[str, object]]:
    # A wrong shape is left for json_format to report, with its own words.
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _rewrite(obj: dict[str, object], keys: Sequence[str]) -> None:
    for key in keys:
        value = obj.get(key)
        if not isinstance(value, str):
            continue
        try:
            raw = bytes.fromhex(value)
        except ValueError as exc:
            raise OtlpError(f"{key} {value[:40]!r} is not hex") from exc
        obj[key] = base64.b64encode(raw).decode("ascii")


def _resource_spans(rs: ResourceSpans) -> list[Span]:
    service = ""
    for kv in rs.resource.attributes:
        if kv.key == "service.name" and kv.value.WhichOneof("value") == "string_value":
            service = kv.value.string_value
    return [_span(s, service) for ss in rs.scope_spans for s in ss.spans]


def _span(s: PbSpan, service: str) -> Span:
    trace_id, span_id = s.trace_id.hex(), s.span_id.hex()
    if len(trace_id) != 32 or trace_id == _ZERO_TRACE:
        raise OtlpError(f"span {s.name[:60]!r}: trace_id must be 16 bytes, not all zero")
    if len(span_id) != 16 or span_id == _ZERO_SPAN:
        raise OtlpError(f"span {s.name[:60]!r}: span_id must be 8 bytes, not all zero")
    parent = s.parent_span_id.hex()
    if parent and len(parent) != 16:
        raise OtlpError(f"span {s.name[:60]!r}: parent_span_id must be 8 bytes or empty")
    # Nanoseconds since 1970 fit in int64 until 2262; SQLite's integers are int64.
    if max(s.start_time_unix_nano, s.end_time_unix_nano) > _MAX_NS:
        raise OtlpError(f"span {s.name[:60]!r}: a time past the year 2262")
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_id="" if parent == _ZERO_SPAN else parent,
        service=service,
        name=s.name,
        start_ns=s.start_time_unix_nano,
        end_ns=s.end_time_unix_nano,
        kind=_KINDS.get(s.kind, SpanKind.UNSPECIFIED),
        status=_STATUSES.get(s.status.code, SpanStatus.UNSET),
        status_message=s.status.message,
        attributes={kv.key: _flat(kv.value) for kv in s.attributes},
    )


def _flat(value: AnyValue) -> AttrValue:
    """An attribute as a scalar; arrays and maps as compact JSON text."""
    plain = _plain(value)
    if isinstance(plain, list | dict):
        return json.dumps(plain, separators=(",", ":"), sort_keys=True)
    return plain


_Plain = str | int | float | bool | list["_Plain"] | dict[str, "_Plain"]


def _plain(value: AnyValue) -> _Plain:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_plain(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _plain(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if which is None:
        return ""  # an empty AnyValue
    scalar: str | int | float | bool = getattr(value, which)  # string, bool, int or double
    return scalar


# -- writing ------------------------------------------------------------------------


def _pb_span(s: Span) -> PbSpan:
    return PbSpan(
        trace_id=bytes.fromhex(s.trace_id),
        span_id=bytes.fromhex(s.span_id),
        parent_span_id=bytes.fromhex(s.parent_id),
        name=s.name,
        kind=PbSpan.SpanKind.ValueType(_PB_KINDS[s.kind]),
        start_time_unix_nano=s.start_ns,
        end_time_unix_nano=s.end_ns,
        status=Status(
            code=Status.StatusCode.ValueType(_PB_STATUSES[s.status]), message=s.status_message
        ),
        attributes=[KeyValue(key=k, value=_any(v)) for k, v in s.attributes.items()],
    )


def _any(v: AttrValue) -> AnyValue:
    if isinstance(v, bool):  # before int: a bool is an int
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    return AnyValue(string_value=v)

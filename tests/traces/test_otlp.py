"""The OTLP decoder: round trips, limits, and mutated bodies (one error type, never another)."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultday.core.otlp import (
    CONTENT_JSON,
    CONTENT_PROTOBUF,
    OtlpError,
    OtlpTooLarge,
    decode,
    encode,
)
from faultday.core.spans import Span, SpanKind, SpanStatus

SPANS = [
    Span(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        parent_id="",
        service="agent",
        name="POST /v1/chat",
        start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_000_250_000_000,
        kind=kind,
        status=status,
        status_message="down" if status == SpanStatus.ERROR else "",
        attributes={"n": 3, "ok": True, "ratio": 0.25, "s": "x"},
    )
    for kind, status in zip(SpanKind, [*SpanStatus, *SpanStatus], strict=False)
]
BODY = encode(SPANS, "agent")


def test_encode_decode_round_trip_for_every_kind_and_status() -> None:
    assert decode(BODY, content_type=CONTENT_PROTOBUF) == SPANS
    gz = gzip.compress(BODY)
    assert (
        decode(gz, content_type=CONTENT_PROTOBUF + "; charset=x", content_encoding="GZIP") == SPANS
    )


def test_limits_raise_the_too_large_kind_of_the_one_error() -> None:
    with pytest.raises(OtlpTooLarge):
        decode(BODY, content_type=CONTENT_PROTOBUF, max_body=len(BODY) - 1)
    bomb = gzip.compress(b"\0" * 10_000_000)
    with pytest.raises(OtlpTooLarge, match="decompresses"):
        decode(bomb, content_type=CONTENT_PROTOBUF, content_encoding="gzip", max_decoded=1_000_000)
    assert issubclass(OtlpTooLarge, OtlpError)


@pytest.mark.parametrize(
    ("body", "kwargs", "reason"),
    [
        (b"\x0a\xff", {}, "protobuf"),
        (gzip.compress(BODY)[:-5], {"content_encoding": "gzip"}, "gzip"),
        (b"not gzip", {"content_encoding": "gzip"}, "gzip"),
        (BODY, {"content_encoding": "zstd"}, "Content-Encoding"),
        (BODY, {"content_type": "text/plain"}, "Content-Type"),
        (b"[1]", {"content_type": CONTENT_JSON}, "JSON object"),
        (b'{"resourceSpans": 3}', {"content_type": CONTENT_JSON}, "OTLP/JSON"),
        (
            json.dumps(
                {
                    "resourceSpans": [
                        {"scopeSpans": [{"spans": [{"traceId": "ab", "spanId": "cd"}]}]}
                    ]
                }
            ).encode(),
            {"content_type": CONTENT_JSON},
            "trace_id must be 16 bytes",
        ),
    ],
)
def test_malformed_bodies_raise_otlp_error_with_a_reason(
    body: bytes, kwargs: dict[str, str], reason: str
) -> None:
    args = {"content_type": CONTENT_PROTOBUF, **kwargs}
    with pytest.raises(OtlpError, match=reason) as err:
        decode(body, **args)
    assert len(err.value.reason) <= 300


def _json_doc() -> dict[str, object]:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "a"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": SPANS[0].trace_id,
                                "spanId": SPANS[0].span_id,
                                "name": "n",
                                "kind": 3,
                                "startTimeUnixNano": "1",
                                "endTimeUnixNano": "2",
                                "attributes": [{"key": "k", "value": {"intValue": "1"}}],
                                "links": [
                                    {"traceId": SPANS[0].trace_id, "spanId": SPANS[0].span_id}
                                ],
                            }
                        ]
                    }
                ],
            }
        ]
    }


def _decode_or_error(body: bytes, content_type: str, encoding: str = "") -> None:
    """The property: spans, or OtlpError; anything else propagates and fails the test."""
    try:
        spans = decode(body, content_type=content_type, content_encoding=encoding)
    except OtlpError as exc:
        reason = exc.reason
        spans = []
        assert reason  # a short reason, never empty
    for s in spans:
        assert len(s.trace_id) == 32 and len(s.span_id) == 16
        assert all(isinstance(v, str | int | float | bool) for v in s.attributes.values())


@st.composite
def _mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[at:]
    return bytes(data)


_FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FAST
@given(_mutated(BODY))
def test_mutated_protobuf_bodies_decode_or_raise_the_one_error(body: bytes) -> None:
    _decode_or_error(body, CONTENT_PROTOBUF)


@_FAST
@given(_mutated(gzip.compress(BODY)))
def test_mutated_gzip_bodies_decode_or_raise_the_one_error(body: bytes) -> None:
    _decode_or_error(body, CONTENT_PROTOBUF, "gzip")


@_FAST
@given(_mutated(json.dumps(_json_doc()).encode()))
def test_mutated_json_bodies_decode_or_raise_the_one_error(body: bytes) -> None:
    _decode_or_error(body, CONTENT_JSON)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
_KEYS = st.sampled_from(
    [
        "traceId",
        "spanId",
        "parentSpanId",
        "name",
        "kind",
        "startTimeUnixNano",
        "attributes",
        "status",
        "links",
        "value",
        "stringValue",
        "intValue",
        "arrayValue",
        "kvlistValue",
        "values",
    ]
)


@_FAST
@given(path=st.lists(st.integers(0, 5), max_size=6), key=_KEYS, value=_JSON_VALUES)
def test_json_with_a_wrong_value_anywhere_decodes_or_raises_the_one_error(
    path: list[int], key: str, value: object
) -> None:
    doc = _json_doc()
    node: object = doc
    for step in path:  # walk down to some object and put a wrong value there
        children = (
            list(node.values())
            if isinstance(node, dict)
            else node
            if isinstance(node, list)
            else []
        )
        if not children:
            break
        nxt = children[step % len(children)]
        if not isinstance(nxt, dict | list):
            break
        node = nxt
    if isinstance(node, dict):
        node[key] = value
    _decode_or_error(json.dumps(doc).encode(), CONTENT_JSON)

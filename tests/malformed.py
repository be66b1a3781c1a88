"""Malformed requests for the servers the stack ships, derived from each endpoint's schema.

``well_shaped(schema)`` draws JSON that fits a JSON schema (pydantic's
``model_json_schema()`` or a FastAPI ``openapi()`` document); ``request_bodies``
then breaks it the ways clients do: a wrong type, NaN, ±Infinity, 1e400, an
integer of 5000 digits, a list for a scalar, a huge string, nesting thousands
deep, a dropped or unknown field, or bytes that are not JSON at all.
``send`` puts one body on the wire and measures it end to end, stream included.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

Schema = Mapping[str, Any]
Path = tuple[str | int, ...]

# Bounded in examples and time: part of `make test` on a busy 2-core machine.
FUZZ_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    database=None,  # no .hypothesis/ folder left in the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True, slots=True)
class Raw:
    """JSON text that ``json.dumps`` cannot produce (1e400, 5000 digits, deep nesting)."""

    text: str


def encode(value: Any) -> bytes:
    """JSON bytes, ``Raw`` parts spliced in as they are (NaN and Infinity as Python writes them)."""
    raws: list[str] = []

    def placeholder(obj: object) -> str:
        if not isinstance(obj, Raw):
            raise TypeError(f"not JSON: {obj!r}")
        raws.append(obj.text)
        return f"\x00raw{len(raws) - 1}\x00"

    text = json.dumps(value, default=placeholder, allow_nan=True)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{i}\x00"), raw, 1)
    return text.encode("utf-8", "surrogatepass")


# --- well-shaped values from a JSON schema -------------------------------------------------------
# Characters JSON can carry but Unicode text cannot: lone UTF-16 surrogates, sent as \ud800.
_ODD_CHARS = st.characters(categories=["Cs", "Cc", "L", "N", "P", "Zs"])
ODD_STRINGS = ["\ud800", "a\udfffb", "\udc00\ud800", "\x00", "\u202e", "\U0001f600"]
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _resolve(schema: Schema, root: Schema) -> Schema:
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return _resolve(node, root)


def well_shaped(schema: Schema, root: Schema | None = None) -> st.SearchStrategy[Any]:
    """Values that satisfy ``schema`` (sizes kept small; ``root`` resolves ``$ref``)."""
    root = root if root is not None else schema
    schema = _resolve(schema, root)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([well_shaped(s, root) for s in schema[key]])
    if "allOf" in schema:
        return well_shaped(schema["allOf"][0], root)
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([well_shaped({**schema, "type": k}, root) for k in kind])
    make = _MAKERS.get(str(kind))
    return make(schema, root) if make is not None else ANY_JSON


def _integer(schema: Schema, root: Schema) -> st.SearchStrategy[Any]:
    low = schema.get("minimum", schema.get("exclusiveMinimum", -math.inf) + 1)
    high = schema.get("maximum", schema.get("exclusiveMaximum", math.inf) - 1)
    return st.integers(
        min_value=None if math.isinf(low) else math.ceil(low),
        max_value=None if math.isinf(high) else math.floor(high),
    )


def _number(schema: Schema, root: Schema) -> st.SearchStrategy[Any]:
    return st.floats(
        min_value=schema.get("minimum", schema.get("exclusiveMinimum")),
        max_value=schema.get("maximum", schema.get("exclusiveMaximum")),
        exclude_min="exclusiveMinimum" in schema,
        exclude_max="exclusiveMaximum" in schema,
        allow_nan=False,
        allow_infinity=False,
    )


def _string(schema: Schema, root: Schema) -> st.SearchStrategy[Any]:
    if "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True).filter(
            lambda s: len(s) <= schema.get("maxLength", 64)
        )
    low = schema.get("minLength", 0)
    high = min(schema.get("maxLength", low + 24), low + 24)
    # JSON strings may escape lone surrogates (\ud800) that no Unicode encoder takes: 1 in 4.
    odd = st.sampled_from(ODD_STRINGS) | st.text(_ODD_CHARS, min_size=1, max_size=max(high, 1))
    plain = st.text(min_size=low, max_size=high)
    return st.integers(0, 3).flatmap(lambda i: odd if i == 0 else plain)


def _array(schema: Schema, root: Schema) -> st.SearchStrategy[Any]:
    low = schema.get("minItems", 0)
    items = schema.get("items", {})
    return st.lists(
        well_shaped(items, root),
        min_size=low,
        max_size=min(schema.get("maxItems", low + 3), low + 3),
    )


def _object(schema: Schema, root: Schema) -> st.SearchStrategy[Any]:
    props: Mapping[str, Schema] = schema.get("properties", {})
    extra = schema.get("additionalProperties", not props)
    if not props:
        values = ANY_JSON if extra is True else well_shaped(extra or {}, root)
        return st.dictionaries(st.text(max_size=8), values, max_size=3)
    required = set(schema.get("required", ()))
    return st.fixed_dictionaries(
        {k: well_shaped(v, root) for k, v in props.items() if k in required},
        optional={k: well_shaped(v, root) for k, v in props.items() if k not in required},
    )


_MAKERS: dict[str, Callable[[Schema, Schema], st.SearchStrategy[Any]]] = {
    "null": lambda schema, root: st.none(),
    "boolean": lambda schema, root: st.booleans(),
    "integer": _integer,
    "number": _number,
    "string": _string,
    "array": _array,
    "object": _object,
}


# --- breaking them --------------------------------------------------------------------------------
def _deep(n: int, opener: str) -> Raw:
    if opener == "[":
        return Raw("[" * n + "]" * n)
    return Raw('{"a":' * n + "1" + "}" * n)


ODD_TEXT = st.text(_ODD_CHARS, min_size=1)

NASTY: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(
        [None, True, False, "", "abc", "5", [], {}, [5], -1, 0, 1.5, -0.0, 2**63, -(2**63) - 1]
    ),
    st.sampled_from(ODD_STRINGS),
    ODD_TEXT,
    st.sampled_from([math.nan, math.inf, -math.inf, 10**40, -(10**40)]),
    st.sampled_from([Raw("1e400"), Raw("-1e400"), Raw("1" * 5000), Raw("NaN"), Raw("-Infinity")]),
    st.builds(
        lambda n, c: c * n,
        st.integers(10_000, 300_000),
        st.sampled_from(["a", " ", "\u00e9", "\u4e2d", "\U0001f600", "\x00", "\ud800", '"']),
    ),
    st.builds(_deep, st.integers(65, 5000), st.sampled_from(["[", "{"])),
    JSON_SCALARS,
    ANY_JSON,
)

WHOLE_BODIES = st.one_of(
    st.sampled_from(
        [b"", b"{", b"}", b"null", b"[]", b'"x"', b"5", b"NaN", b"\xff\xfe\x00", b"{'a': 1}"]
    ),
    st.builds(lambda n: b"[" * n + b"]" * n, st.integers(100, 200_000)),
    st.builds(lambda n: b'{"a":' * n + b"1" + b"}" * n, st.integers(100, 50_000)),
    st.binary(max_size=64),
)


def _paths(value: Any, path: Path = ()) -> list[Path]:
    """Every node below the root, parents before children."""
    out: list[Path] = []
    items: list[tuple[str | int, Any]] = []
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    for key, child in items:
        out.append((*path, key))
        out.extend(_paths(child, (*path, key)))
    return out


def _parent(body: Any, path: Path) -> Any:
    for key in path[:-1]:
        body = body[key]
    return body


def _mutate(draw: st.DrawFn, body: Any) -> Any:
    paths = _paths(body)

    def nasty() -> Any:
        # A copy: NASTY samples shared objects ([], {}, [5]) that a later mutation edits.
        return copy.deepcopy(draw(NASTY))

    how = draw(st.sampled_from(["replace", "replace", "wrap", "drop", "add"]))
    if how == "add" or not paths:
        if isinstance(body, dict):
            body[draw(st.text(max_size=12))] = nasty()
            return body
        return nasty()
    path = draw(st.sampled_from(paths))
    parent, key = _parent(body, path), path[-1]
    if how == "replace":
        parent[key] = nasty()
    elif how == "wrap":
        parent[key] = [parent[key]]
    else:
        del parent[key]
    return body


@st.composite
def nudged(draw: st.DrawFn, shape: st.SearchStrategy[Any], pins: Mapping[str, Any]) -> Any:
    """Half the time, fields pinned to values that pass the server's own checks.

    A schema says ``model`` is a string and ``n`` an integer; a server also wants
    its own model name and n=1. Pinned bodies get past those checks, so the
    mutations land on the code behind them as well.
    """
    body = draw(shape)
    if isinstance(body, dict) and draw(st.booleans()):
        body = {**body, **{k: draw(v) for k, v in pins.items()}}
    return body


@st.composite
def request_bodies(draw: st.DrawFn, shape: st.SearchStrategy[Any], *, mutate: bool = True) -> bytes:
    """A body as sent: sometimes well-shaped, mostly broken in one to three places."""
    if mutate and draw(st.integers(0, 9)) == 0:
        return draw(WHOLE_BODIES)
    body = copy.deepcopy(draw(shape))  # strategies may share objects (const, enum) between draws
    if mutate and draw(st.integers(0, 4)) > 0:
        for _ in range(draw(st.integers(1, 3))):
            body = _mutate(draw, body)
    return encode(body)


# --- sending them ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    seconds: float
    head: bytes  # the first bytes of the body, for a failure's message


def send(
    client: httpx.Client, method: str, url: str, body: bytes | None, *, timeout: float
) -> Answer:
    """One request, the whole response body read (a stream to its end) within ``timeout``."""
    t0 = time.monotonic()
    headers = {"content-type": "application/json"}
    with client.stream(method, url, content=body, headers=headers, timeout=timeout) as resp:
        head = b""
        for chunk in resp.iter_bytes():
            head = (head + chunk)[:400]
            if time.monotonic() - t0 > timeout:
                break
    return Answer(resp.status_code, time.monotonic() - t0, head)

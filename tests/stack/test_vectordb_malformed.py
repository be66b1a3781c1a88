"""No 500 for a client's mistake: the Qdrant front answers a malformed request as Qdrant does
(a 4xx in Qdrant's error envelope, naming the field), stays up, and stays quick (issue 15, 6).

One front process serves the whole module. The request bodies come from Qdrant's own
schema: the pydantic models that ``qdrant-client`` generates from Qdrant's OpenAPI
document (``qdrant_client.http.models``), drawn by Hypothesis and then broken.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter
from qdrant_client.http import models as qm
from tests.stack.conftest import REPO, marked_processes

from faultday.core.ledger import Ledger
from faultday.core.profile import load_profile
from faultday.stack.stack import Stack
from faultday_refstack.vectordb.seed import MODES

TIMEOUT = 10.0  # what a client waits for one answer
DIM = 4
V = [0.1, 0.2, 0.3, 0.4]
Schema = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Front:
    url: str
    process: psutil.Process
    http: httpx.Client

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        params: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """One request; a malformed answer, a slow one or a dead front fails the test."""
        started = time.monotonic()
        headers = {"content-type": "application/json"} if body is not None else {}
        r = self.http.request(
            method, self.url + path, content=body, params=params, headers=headers, timeout=TIMEOUT
        )
        elapsed = time.monotonic() - started
        sent = (body or b"")[:300]
        assert r.status_code < 500, f"{method} {path[:80]} {sent!r} -> {r.status_code} {r.text}"
        _assert_envelope(r)
        assert elapsed < TIMEOUT, f"{method} {path[:80]} took {elapsed:.1f}s"
        assert self.process.is_running(), "the front died"
        assert self.process.status() != psutil.STATUS_ZOMBIE, "the front died"
        return r


def _assert_envelope(r: httpx.Response) -> None:
    """Qdrant's envelope: ``{"result", "status": "ok", "time"}`` or ``{"status": {"error"}}``."""
    if r.status_code < 400 and not r.url.path.startswith("/collections"):
        return  # /healthz, /metrics and faultday's own /admin/* answer in their own shapes
    data = r.json()
    assert isinstance(data.get("time"), float | int), data
    if r.status_code >= 400:
        error = data["status"]["error"]
        assert isinstance(error, str), data
        assert error, data
    else:
        assert data["status"] == "ok", data


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    run_dir = tmp_path_factory.mktemp("qdrant-malformed")
    profile = load_profile("local", base_dir=REPO).subset(["qdrant"])
    s = Stack(profile, run_dir=run_dir, ledger=Ledger.in_dir(run_dir))
    try:
        s.up(timeout=60)
        (proc,) = [
            p
            for p in marked_processes(run_dir)
            if "faultday_refstack.vectordb" in " ".join(p.cmdline())
        ]
        with httpx.Client() as http:
            f = Front(s.endpoints()["qdrant"], proc, http)
            _fill(f)
            yield f
    finally:
        s.down()
        assert marked_processes(run_dir) == []


def _fill(f: Front) -> None:
    """``t4``: four-dimensional, a few points with payloads; ``t4a`` is an alias of it."""
    create = {"vectors": {"size": DIM, "distance": "Cosine"}}
    assert f.send("PUT", "/collections/t4", json.dumps(create).encode()).status_code == 200
    points = [
        {"id": i, "vector": [0.1 * i, 0.2, 0.3, 0.4], "payload": {"city": c, "n": i}}
        for i, c in enumerate(["Berlin", "Paris", "", None])
    ]
    body = json.dumps({"points": points}).encode()
    assert f.send("PUT", "/collections/t4/points?wait=true", body).status_code == 200
    alias = {"actions": [{"create_alias": {"collection_name": "t4", "alias_name": "t4a"}}]}
    assert f.send("POST", "/collections/aliases", json.dumps(alias).encode()).status_code == 200


# -- the cases the issue lists, each with the answer real Qdrant gives ----------------------


@dataclass(frozen=True, slots=True)
class Case:
    method: str
    path: str
    body: object | str  # a str is sent as it is (NaN is not JSON)
    status: int
    says: str  # a part of the error message (the field it names)


def _raw(value: object) -> bytes:
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


DEEP = '{"vector":[0.1,0.2,0.3,0.4],"limit":1,"filter":' + '{"must":[' * 100 + "]}" * 100 + "}"
CASES = {
    "size -1": Case(
        "PUT", "/collections/c1", {"vectors": {"size": -1, "distance": "Dot"}}, 400, "vectors.size"
    ),
    "size x": Case(
        "PUT", "/collections/c1", {"vectors": {"size": "x", "distance": "Dot"}}, 400, "vectors.size"
    ),
    "size 0": Case(
        "PUT",
        "/collections/c1",
        {"vectors": {"size": 0, "distance": "Dot"}},
        422,
        "vectors.size: value 0 invalid",
    ),
    "distance": Case(
        "PUT",
        "/collections/c1",
        {"vectors": {"size": 4, "distance": "Far"}},
        400,
        "vectors.distance",
    ),
    "points as a string": Case("PUT", "/collections/t4/points", {"points": "abc"}, 400, "points"),
    "string payload": Case(
        "PUT",
        "/collections/t4/points",
        {"points": [{"id": 9, "vector": V, "payload": "x"}]},
        400,
        "points[0].payload",
    ),
    "2^70 id": Case(
        "PUT",
        "/collections/t4/points",
        {"points": [{"id": 2**70, "vector": V}]},
        400,
        "points[0].id",
    ),
    "2^70 id to retrieve": Case("POST", "/collections/t4/points", {"ids": [2**70]}, 400, "ids[0]"),
    "2^70 id in the path": Case("GET", f"/collections/t4/points/{2**70}", None, 400, "id"),
    "limit -1": Case(
        "POST", "/collections/t4/points/search", {"vector": V, "limit": -1}, 400, "limit"
    ),
    "limit 2^70": Case(
        "POST", "/collections/t4/points/query", {"query": V, "limit": 2**70}, 400, "limit"
    ),
    "limit 0": Case(
        "POST", "/collections/t4/points/scroll", {"limit": 0}, 422, "limit: value 0 invalid"
    ),
    "filter must a string": Case(
        "POST", "/collections/t4/points/count", {"filter": {"must": "x"}}, 400, "filter.must"
    ),
    "filter unknown condition": Case(
        "POST",
        "/collections/t4/points/scroll",
        {"filter": {"must": [{"foo": 1}]}},
        400,
        "filter.must[0]",
    ),
    "filter unknown key": Case(
        "POST", "/collections/t4/points/query", {"filter": {"mus": []}}, 400, "filter.mus"
    ),
    "filter 100 levels deep": Case(
        "POST", "/collections/t4/points/search", DEEP, 400, "recursion limit"
    ),
    "score_threshold x": Case(
        "POST",
        "/collections/t4/points/search",
        {"vector": V, "limit": 1, "score_threshold": "x"},
        400,
        "score_threshold",
    ),
    "a 5000-character name": Case(
        "PUT",
        "/collections/" + "a" * 5000,
        {"vectors": {"size": 4, "distance": "Dot"}},
        422,
        "name",
    ),
    "a 5000-character name read": Case("GET", "/collections/" + "a" * 5000, None, 422, "name"),
    "NaN vector": Case(
        "PUT", "/collections/t4/points", '{"points":[{"id":9,"vector":[NaN,1,2,3]}]}', 400, "NaN"
    ),
    "NaN query": Case(
        "POST", "/collections/t4/points/query", '{"query":[0.1,NaN,1,2]}', 400, "NaN"
    ),
    "1e400 vector": Case(
        "POST", "/collections/t4/points/search", '{"vector":[1e400,1,2,3],"limit":1}', 400, "1e400"
    ),
    "search without a vector": Case(
        "POST", "/collections/t4/points/search", {"limit": 3}, 400, "missing field `vector`"
    ),
    "is_empty true": Case(
        "POST",
        "/collections/t4/points/query",
        {"filter": {"must": [{"key": "city", "is_empty": True}]}},
        200,
        "",
    ),
    "is_empty null": Case(
        "POST",
        "/collections/t4/points/query",
        {"filter": {"must": [{"key": "city", "is_empty": None}]}},
        422,
        "At least one field condition must be specified",
    ),
    "is_null true": Case(
        "POST",
        "/collections/t4/points/count",
        {"filter": {"must": [{"key": "city", "is_null": True}]}},
        200,
        "",
    ),
    "multivector query": Case(
        "POST",
        "/collections/t4/points/query",
        {"query": [[1, 2]]},
        400,
        "Conversion between multi and regular vectors failed",
    ),
    "wrong dimension": Case(
        "POST", "/collections/t4/points/query", {"query": [1, 2]}, 400, "expected dim: 4, got 2"
    ),
    "empty payload key": Case(
        "PUT",
        "/collections/t4/points",
        {"points": [{"id": 7, "vector": V, "payload": {"": 1}}]},
        200,
        "",
    ),
    "timeout -1": Case("POST", "/collections/t4/points/scroll?timeout=-1", {}, 400, "timeout"),
    "timeout -1 on an update": Case(
        "PUT", "/collections/t4/points?timeout=-1", {"points": []}, 400, "timeout"
    ),
    "timeout 0 on a collection": Case(
        "DELETE", "/collections/nothing?timeout=0", None, 422, "timeout"
    ),
    "wait x": Case("PUT", "/collections/t4/points?wait=x", {"points": []}, 400, "wait"),
    "not JSON": Case("POST", "/collections/t4/points/count", "{'a': 1}", 400, "JSON body"),
    "no such collection": Case("POST", "/collections/nope/points/count", {}, 404, "nope"),
    "no such route": Case("GET", "/collection", None, 404, "Not Found"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_listed_cases_answer_as_qdrant_does(front: Front, case: Case) -> None:
    body = None if case.body is None else _raw(case.body)
    r = front.send(case.method, case.path, body)
    assert r.status_code == case.status, r.text
    if case.status >= 400:
        assert case.says in r.json()["status"]["error"]


def test_inputs_real_qdrant_serves_are_served(front: Front) -> None:
    """is_empty / is_null (both spellings), an empty payload key, a filter nested deep."""
    create = {"vectors": {"size": DIM, "distance": "Dot"}}
    assert front.send("PUT", "/collections/conds", json.dumps(create).encode()).status_code == 200
    payloads = [{"other": 1}, {"city": None}, {"city": []}, {"city": "x"}, {"city": ""}, {"": 1}]
    points = [{"id": i, "vector": V, "payload": p} for i, p in enumerate(payloads)]
    front.send(
        "PUT", "/collections/conds/points?wait=true", json.dumps({"points": points}).encode()
    )

    def ids(condition: dict[str, Any], *, levels: int = 0) -> set[int]:
        flt: dict[str, Any] = {"must": [condition]}
        for _ in range(levels):
            flt = {"must": [flt]}
        body = json.dumps({"filter": flt, "limit": 100}).encode()
        r = front.send("POST", "/collections/conds/points/scroll", body)
        assert r.status_code == 200, r.text
        return {p["id"] for p in r.json()["result"]["points"]}

    try:
        empty = {0, 1, 2, 5}  # missing, null or []: Qdrant's "empty"
        assert ids({"key": "city", "is_empty": True}) == empty
        assert ids({"is_empty": {"key": "city"}}) == empty
        assert ids({"key": "city", "is_empty": False}) == {3, 4}
        assert ids({"key": "city", "is_null": True}) == {1}
        assert ids({"is_null": {"key": "city"}}) == {1}
        assert ids({"key": "city", "match": {"value": "x"}}, levels=40) == {3}
        r = front.send("POST", "/collections/conds/points", b'{"ids": [5], "with_payload": true}')
        assert r.json()["result"][0]["payload"] == {"": 1}
    finally:
        front.send("DELETE", "/collections/conds")


def test_a_score_that_overflows_is_null_not_a_500(front: Front) -> None:
    create = {"vectors": {"size": 2, "distance": "Dot"}}
    assert front.send("PUT", "/collections/big", json.dumps(create).encode()).status_code == 200
    try:
        pts = {"points": [{"id": 1, "vector": [3e38, 3e38]}]}
        front.send("PUT", "/collections/big/points", json.dumps(pts).encode())
        r = front.send("POST", "/collections/big/points/query", b'{"query":[3e38,3e38]}')
        assert r.json()["result"]["points"][0]["score"] is None  # serde_json writes inf as null
    finally:
        front.send("DELETE", "/collections/big")


# -- property-based: bodies from Qdrant's schema, then broken ------------------------------


@dataclass(frozen=True, slots=True)
class Raw:
    """JSON text ``json.dumps`` cannot write (1e400, NaN, 5000 digits, deep nesting)."""

    text: str


def encode(value: object) -> bytes:
    raws: list[str] = []

    def placeholder(obj: object) -> str:
        assert isinstance(obj, Raw)
        raws.append(obj.text)
        return f"\x00raw{len(raws) - 1}\x00"

    text = json.dumps(value, default=placeholder, allow_nan=True)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{i}\x00"), raw, 1)
    return text.encode("utf-8", "surrogatepass")


INTS = [-1, 0, 1, 3, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -(2**63) - 1]
FLOATS = [0.0, -0.0, 0.5, 1e38, 3.5e38, -1e300, 1e300]
KEYS = ["city", "n", "", "a.b", "a[]", "city[0]", 'a"b', "tag"]
VECTOR = st.lists(st.floats(-1, 1), min_size=DIM, max_size=DIM)


class FromSchema:
    """Values that fit a JSON schema; recursion (a Filter holds Filters) is cut at a depth."""

    def __init__(self, root: Schema, *, max_depth: int = 3) -> None:
        self.defs: Mapping[str, Schema] = root.get("$defs", {})
        self.max_depth = max_depth
        self._memo: dict[tuple[str, int], st.SearchStrategy[Any]] = {}

    def __call__(self, schema: Schema, depth: int = 0) -> st.SearchStrategy[Any]:
        if "$ref" in schema:
            return self._ref(schema["$ref"].rsplit("/", 1)[-1], depth)
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return st.one_of([self(s, depth) for s in schema[key]])
        if "allOf" in schema:
            return self(schema["allOf"][0], depth)
        maker = self._makers().get(str(schema.get("type")))
        return maker(schema, depth) if maker is not None else ANY_JSON

    def _ref(self, name: str, depth: int) -> st.SearchStrategy[Any]:
        if depth >= self.max_depth:
            return st.none()
        key = (name, depth)
        if key not in self._memo:
            self._memo[key] = st.deferred(lambda: self(self.defs[name], depth + 1))
        return self._memo[key]

    def _makers(self) -> dict[str, Callable[[Schema, int], st.SearchStrategy[Any]]]:
        return {
            "null": lambda s, d: st.none(),
            "boolean": lambda s, d: st.booleans(),
            "integer": lambda s, d: st.integers(0, 20) | st.sampled_from(INTS),
            "number": lambda s, d: st.floats(-10, 10) | st.sampled_from(FLOATS),
            "string": self._string,
            "array": self._array,
            "object": self._object,
        }

    def _string(self, schema: Schema, depth: int) -> st.SearchStrategy[Any]:
        if schema.get("format") == "uuid":
            return st.uuids().map(str)
        return st.sampled_from(KEYS) | st.text(max_size=12)

    def _array(self, schema: Schema, depth: int) -> st.SearchStrategy[Any]:
        items = schema.get("items", {})
        if items.get("type") == "number":  # a vector: mostly of the collection's dimension
            return VECTOR | st.lists(self(items, depth), max_size=6)
        return st.lists(self(items, depth), max_size=3)

    def _object(self, schema: Schema, depth: int) -> st.SearchStrategy[Any]:
        props: Mapping[str, Schema] = schema.get("properties", {})
        if not props:  # a payload, a map of named vectors
            extra = schema.get("additionalProperties", True)
            values = ANY_JSON if not isinstance(extra, Mapping) else self(extra, depth)
            return st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), values, max_size=3)
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: self(v, depth) for k, v in props.items() if k in required},
            optional={k: self(v, depth) for k, v in props.items() if k not in required},
        )


ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)

NASTY: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([None, True, "", "x", "5", [], {}, [5], 1.5, *INTS, *FLOATS]),
    st.sampled_from([Raw("NaN"), Raw("-Infinity"), Raw("1e400"), Raw("1" * 5000)]),
    st.sampled_from([V, [[1, 2]], [V], {"": V}, {"x": V}, {"indices": [1], "values": [2]}]),
    st.sampled_from([{"key": "city", "is_empty": None}, {"must": [{"foo": 1}]}, {"has_id": [-1]}]),
    st.builds(lambda n: "é" * n, st.integers(1000, 200_000)),
    st.builds(lambda n: Raw("[" * n + "]" * n), st.sampled_from([129, 300, 20_000])),
    st.builds(lambda n: Raw('{"a":' * n + "1" + "}" * n), st.sampled_from([129, 5_000])),
    ANY_JSON,
)
WHOLE = st.sampled_from(
    [b"", b"{", b"null", b"[]", b'"x"', b"5", b"NaN", b"\xff\xfe\x00", b"{'a': 1}", b"[" * 50_000]
)


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every node below the root, parents before children."""
    items: Any = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    out: list[tuple[Any, ...]] = []
    for key, child in items:
        out += [(*path, key), *_nodes(child, (*path, key))]
    return out


def _nasty(draw: st.DrawFn) -> Any:
    # A copy: a later mistake may edit inside it, and the drawn values are shared constants.
    return copy.deepcopy(draw(NASTY))


def _break(draw: st.DrawFn, body: Any) -> Any:
    """One client mistake: a node replaced, wrapped in a list or dropped, or a key added."""
    nodes = _nodes(body)
    how = draw(st.sampled_from(["replace", "replace", "wrap", "drop", "add"]))
    if how == "add" or not nodes:
        if isinstance(body, dict):
            body[draw(st.text(max_size=8))] = _nasty(draw)
            return body
        return _nasty(draw)
    path = draw(st.sampled_from(nodes))
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    if how == "replace":
        parent[path[-1]] = _nasty(draw)
    elif how == "wrap":
        parent[path[-1]] = [parent[path[-1]]]
    else:
        del parent[path[-1]]
    return body


@st.composite
def bodies(draw: st.DrawFn, shape: st.SearchStrategy[Any], pins: Mapping[str, Any]) -> bytes:
    """A body as a client sends it: from the schema, often pinned past the engine's checks,
    mostly broken in one to three places, sometimes not JSON at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(WHOLE)
    body = copy.deepcopy(draw(shape))
    if isinstance(body, dict) and pins and draw(st.booleans()):
        body.update({k: draw(v) for k, v in pins.items()})
    if draw(st.integers(0, 3)) > 0:
        for _ in range(draw(st.integers(1, 3))):
            body = _break(draw, body)
    return encode(body)


NAMES = st.one_of(
    st.just("t4"),
    st.just("t4"),
    st.just("t4a"),
    st.sampled_from(["missing", "a" * 256, "a" * 5000, "x y", "ü", "%00", "..", "a:b"]),
    st.text(min_size=1, max_size=12),
).map(lambda n: urllib.parse.quote(n, safe=""))
QUERY_VALUES = ["true", "false", "x", "-1", "0", "1", "5", "99999999999999999999999", "", "all"]
PARAMS = st.one_of(
    st.just({}),
    st.just({}),
    st.dictionaries(
        st.sampled_from(["wait", "timeout", "ordering", "consistency", "x"]),
        st.sampled_from([*QUERY_VALUES, "weak", "strong"]) | st.text(max_size=6),
        max_size=3,
    ),
)


def _schema(shape: object) -> Schema:
    return TypeAdapter(shape).json_schema()


def _search_schema() -> Schema:
    """qdrant-client 1.20 no longer models ``/points/search``; its body is QueryRequest's,
    with ``vector`` (a dense vector or ``{"name", "vector"}``) for ``query`` and a required
    ``limit``."""
    query = _schema(qm.QueryRequest)
    props = {k: v for k, v in query["properties"].items() if k not in ("query", "prefetch")}
    props["vector"] = {
        "anyOf": [
            {"type": "array", "items": {"type": "number"}},
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "vector": {"type": "array", "items": {"type": "number"}},
                },
                "required": ["name", "vector"],
            },
        ]
    }
    return {**query, "properties": props, "required": ["vector", "limit"]}


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # {name}: a collection
    schema: Schema
    pins: Mapping[str, st.SearchStrategy[Any]]

    @property
    def shape(self) -> st.SearchStrategy[Any]:
        return _shape(self.path + self.method)


_SHAPES: dict[str, st.SearchStrategy[Any]] = {}


def _shape(key: str) -> st.SearchStrategy[Any]:
    return _SHAPES[key]


POINT = st.fixed_dictionaries(
    {"id": st.integers(0, 50) | st.uuids().map(str), "vector": VECTOR},
    optional={"payload": st.dictionaries(st.sampled_from(KEYS), ANY_JSON, max_size=3)},
)
LIMIT = st.integers(1, 20)
ROUTES = {
    "create collection": Route("PUT", "/collections/{name}", _schema(qm.CreateCollection), {}),
    "create index": Route("PUT", "/collections/{name}/index", _schema(qm.CreateFieldIndex), {}),
    "aliases": Route("POST", "/collections/aliases", _schema(qm.ChangeAliasesOperation), {}),
    "upsert": Route(
        "PUT",
        "/collections/{name}/points",
        _schema(qm.PointInsertOperations),
        {"points": st.lists(POINT, max_size=3)},
    ),
    "delete points": Route(
        "POST", "/collections/{name}/points/delete", _schema(qm.PointsSelector), {}
    ),
    "query": Route(
        "POST",
        "/collections/{name}/points/query",
        _schema(qm.QueryRequest),
        {"query": VECTOR | st.fixed_dictionaries({"nearest": VECTOR}), "limit": LIMIT},
    ),
    "search": Route(
        "POST",
        "/collections/{name}/points/search",
        _search_schema(),
        {"vector": VECTOR, "limit": LIMIT},
    ),
    "count": Route("POST", "/collections/{name}/points/count", _schema(qm.CountRequest), {}),
    "scroll": Route(
        "POST", "/collections/{name}/points/scroll", _schema(qm.ScrollRequest), {"limit": LIMIT}
    ),
    "retrieve": Route("POST", "/collections/{name}/points", _schema(qm.PointRequest), {}),
    "degrade": Route(
        "POST",
        "/admin/degrade",
        {"type": "object", "properties": {"mode": {"enum": list(MODES)}}, "required": ["mode"]},
        {},
    ),
}
for _route in ROUTES.values():
    _SHAPES[_route.path + _route.method] = FromSchema(_route.schema)(_route.schema)
SETTINGS = settings(
    max_examples=30,  # x 11 routes, plus the reads below: a few hundred requests in all
    deadline=None,
    database=None,  # no .hypothesis/ folder left in the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
@SETTINGS
@given(data=st.data())
def test_no_malformed_body_gets_a_5xx(front: Front, route: Route, data: st.DataObject) -> None:
    body = data.draw(bodies(route.shape, route.pins), label="body")
    name = data.draw(NAMES, label="name")
    if route.method == "PUT" and route.path == "/collections/{name}" and name in ("t4", "t4a"):
        name = "fresh"  # keep the module's collection; creating another is what is tested
    params = data.draw(PARAMS, label="query")
    front.send(route.method, route.path.format(name=name), body, params)
    if route.path == "/admin/degrade":
        front.send("POST", "/admin/restore")


READ_PATHS = [
    "/collections/{name}",
    "/collections/{name}/exists",
    "/collections/{name}/aliases",
    "/collections/{name}/points/{id}",
]
POINT_IDS = st.sampled_from(
    [
        "1",
        "0",
        "-1",
        str(2**64),
        str(2**70),
        "x",
        "²",
        "1.5",
        "00000000-0000-0000-0000-000000000000",
    ]
) | st.text(min_size=1, max_size=8).map(lambda t: urllib.parse.quote(t, safe=""))


@SETTINGS
@given(data=st.data())
def test_no_malformed_path_or_query_gets_a_5xx(front: Front, data: st.DataObject) -> None:
    method = data.draw(st.sampled_from(["GET", "DELETE"]), label="method")
    path = data.draw(st.sampled_from(READ_PATHS), label="path")
    name = data.draw(NAMES, label="name")
    if method == "DELETE" and name in ("t4", "t4a"):
        name = "gone"  # the module's collection stays
    pid = data.draw(POINT_IDS, label="id")
    front.send(method, path.format(name=name, id=pid), None, data.draw(PARAMS, label="query"))


def test_the_front_still_works_after_the_fuzzing(front: Front) -> None:
    """The same process, still answering right: an upserted point is found first."""
    point = {"id": 4242, "vector": [0.9, -0.1, 0.2, 0.7], "payload": {"k": "v"}}
    body = json.dumps({"points": [point]}).encode()
    assert front.send("PUT", "/collections/t4/points?wait=true", body).status_code == 200
    query = json.dumps({"vector": point["vector"], "limit": 1, "with_payload": True}).encode()
    (hit,) = front.send("POST", "/collections/t4/points/search", query).json()["result"]
    assert (hit["id"], hit["payload"]) == (4242, {"k": "v"})
    assert hit["score"] == pytest.approx(1.0, abs=1e-5)

"""Collections and aliases over Qdrant Edge shards, with Qdrant's REST JSON shapes.

Each collection is one ``qdrant_edge.EdgeShard`` in its own folder. This module
translates the JSON that ``qdrant-client`` sends over REST (filters, ids,
queries) into qdrant-edge objects and back; the HTTP layer is ``app.py``.
"""

from __future__ import annotations

import math
import re
import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from faultday_refstack.vectordb import wire as w
from faultday_refstack.vectordb.wire import ApiError

DISTANCES = {
    "Cosine": qe.Distance.Cosine,
    "Euclid": qe.Distance.Euclid,
    "Dot": qe.Distance.Dot,
    "Manhattan": qe.Distance.Manhattan,
}


@dataclass(slots=True)
class Collection:
    name: str
    size: int
    distance: str
    shard: Any  # qdrant_edge.EdgeShard (untyped extension)
    path: Path
    created_at: float = field(default_factory=time.time)
    payload_schema: dict[str, str] = field(default_factory=dict)


# -- wire models → qdrant-edge ------------------------------------------------------

PointId = int | uuid.UUID
Vector = w.VectorInput | Sequence[float]


def id_json(pid: object) -> int | str:
    return pid if isinstance(pid, int) else str(pid)


def _match(m: w.Match) -> Any:  # noqa: PLR0911 (one return per match kind)
    if isinstance(m, w.MatchValue):
        return qe.MatchValue(m.value)
    if isinstance(m, w.MatchAny):
        return qe.MatchAny(m.any)
    if isinstance(m, w.MatchExcept):
        return qe.MatchExcept(m.except_)
    if isinstance(m, w.MatchText):
        return qe.MatchText(m.text)
    if isinstance(m, w.MatchTextAny):
        return qe.MatchTextAny(m.text_any)
    if isinstance(m, w.MatchPrefix):
        return qe.MatchPrefix(m.prefix)
    if isinstance(m, w.MatchSubstring):
        return qe.MatchSubstring(m.substring)
    return qe.MatchPhrase(m.phrase)


def _range(r: w.Range) -> Any:
    bounds = {k: v for k, v in r.model_dump().items() if v is not None}
    if any(isinstance(v, str) for v in bounds.values()):
        return qe.RangeDateTime(**bounds)
    return qe.RangeFloat(**bounds)


def _geo(p: w.GeoPoint) -> Any:
    return qe.GeoPoint(lon=p.lon, lat=p.lat)


def _field(c: w.FieldCondition) -> Any:
    kw: dict[str, Any] = {"is_empty": c.is_empty, "is_null": c.is_null}
    if c.match is not None:
        kw["match"] = _match(c.match)
    if c.range is not None:
        kw["range"] = _range(c.range)
    if c.values_count is not None:
        kw["values_count"] = qe.ValuesCount(**c.values_count.model_dump())
    if (box := c.geo_bounding_box) is not None:
        kw["geo_bounding_box"] = qe.GeoBoundingBox(_geo(box.top_left), _geo(box.bottom_right))
    if (circle := c.geo_radius) is not None:
        kw["geo_radius"] = qe.GeoRadius(_geo(circle.center), circle.radius)
    if (poly := c.geo_polygon) is not None:
        holes = [[_geo(p) for p in ring.points] for ring in poly.interiors or []]
        kw["geo_polygon"] = qe.GeoPolygon([_geo(p) for p in poly.exterior.points], holes or None)
    return qe.FieldCondition(c.key, **kw)


def _condition(c: w.Condition) -> Any:  # noqa: PLR0911 (one return per condition kind)
    if isinstance(c, w.FieldCondition):
        return _field(c)
    if isinstance(c, w.IsEmptyCondition):
        return qe.IsEmptyCondition(c.is_empty.key)
    if isinstance(c, w.IsNullCondition):
        return qe.IsNullCondition(c.is_null.key)
    if isinstance(c, w.HasIdCondition):
        return qe.HasIdCondition(set(c.has_id))
    if isinstance(c, w.HasVectorCondition):
        return qe.HasVectorCondition(c.has_vector)
    if isinstance(c, w.SliceCondition):
        # In the extension but missing from its type stubs.
        return qe.SliceCondition(c.slice.total, c.slice.index)  # type: ignore[attr-defined]
    if isinstance(c, w.NestedCondition):
        return qe.NestedCondition(c.nested.key, _filter(c.nested.filter))
    return _filter(c)


def _conditions(cs: list[w.Condition] | None) -> list[Any] | None:
    return None if cs is None else [_condition(c) for c in cs]


def _filter(f: w.Filter) -> Any:
    ms = f.min_should
    return qe.Filter(
        must=_conditions(f.must),
        should=_conditions(f.should),
        must_not=_conditions(f.must_not),
        min_should=None
        if ms is None
        else qe.MinShould([_condition(c) for c in ms.conditions], ms.min_count),
    )


def to_filter(f: w.Filter | None) -> Any:
    """The qdrant-edge filter for a request's ``filter`` (None: no filter)."""
    if f is None or f == w.Filter():
        return None
    try:
        return _filter(f)
    except ValueError as exc:
        # qdrant-edge checks what the wire models cannot: JSON paths, datetimes.
        detail = " ".join(str(exc).split())
        raise ApiError(400, f"Format error in JSON body: filter: {detail}") from None


def dense_vector(raw: Vector, size: int) -> list[float]:
    """The collection's single dense vector out of what a client sent, as Qdrant checks it."""
    if isinstance(raw, w.NamedVectors):
        names = [n for n, _ in raw.vectors]
        if names != [""]:
            name = next((n for n in names if n != ""), "")
            raise ApiError(400, f"Wrong input: Not existing vector name error: {name}")
        return dense_vector(raw.vectors[0][1], size)
    if isinstance(raw, w.MultiVector):
        raise ApiError(400, "Wrong input: Conversion between multi and regular vectors failed")
    if isinstance(raw, w.SparseVector):
        raise ApiError(400, "Wrong input: Conversion between sparse and regular vectors failed")
    if isinstance(raw, w.InferenceInput):
        raise ApiError(400, f"Bad request: this front does not embed a {raw.kind}; send a vector")
    if len(raw) != size:
        raise ApiError(
            400, f"Wrong input: Vector dimension error: expected dim: {size}, got {len(raw)}"
        )
    return [float(x) for x in raw]


def _point_vector(raw: Vector, size: int) -> list[float] | dict[str, Any]:
    # A point may carry no vector at all (``{}``), as on Qdrant.
    if isinstance(raw, w.NamedVectors) and not raw.vectors:
        return {}
    return dense_vector(raw, size)


def with_payload(raw: w.WithPayload | None) -> Any:
    if isinstance(raw, w.PayloadSelector):
        if raw.exclude:
            return qe.PayloadSelector.Exclude(list(raw.keys))
        return list(raw.keys)
    if isinstance(raw, tuple):
        return list(raw)
    return raw


def with_vector(raw: w.WithVector | None) -> bool:
    # The only vector is the unnamed one: a list of names asks for it when it is non-empty.
    return bool(raw)


def _score(value: float) -> float | None:
    # serde_json writes a non-finite float as null; JSON has no NaN or Infinity.
    return value if math.isfinite(value) else None


def scored_json(p: Any, *, vectors: bool) -> dict[str, Any]:
    return {
        "id": id_json(p.id),
        "version": p.version,
        "score": _score(p.score),
        "payload": p.payload,
        "vector": p.vector if vectors else None,
        "shard_key": None,
        "order_value": None,
    }


def record_json(r: Any, *, vectors: bool) -> dict[str, Any]:
    return {
        "id": id_json(r.id),
        "payload": r.payload,
        "vector": r.vector if vectors else None,
        "shard_key": None,
        "order_value": None,
    }


# -- the store -----------------------------------------------------------------------


class Store:
    """Every collection and alias of one front; thread-safe for FastAPI's worker threads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.collections: dict[str, Collection] = {}
        self.aliases: dict[str, str] = {}
        self.lock = threading.RLock()
        self._op = 0
        root.mkdir(parents=True, exist_ok=True)

    def next_op(self) -> int:
        with self.lock:
            self._op += 1
            return self._op

    def resolve(self, name: str) -> Collection:
        with self.lock:
            real = self.aliases.get(name, name)
            c = self.collections.get(real)
        if c is None:
            raise ApiError(404, f"Not found: Collection `{name}` doesn't exist!")
        return c

    def exists(self, name: str) -> bool:
        with self.lock:
            return self.aliases.get(name, name) in self.collections

    def create(self, name: str, *, size: int, distance: str) -> Collection:
        if distance not in DISTANCES:
            raise ApiError(400, f"unknown distance {distance!r}")
        with self.lock:
            if name in self.collections or name in self.aliases:
                raise ApiError(409, f"Wrong input: Collection `{name}` already exists!")
            # Names may be 255 characters of any script: the folder takes a safe stem of it.
            stem = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:40]
            path = self.root / f"{stem}-{uuid.uuid4().hex[:8]}"
            config = qe.EdgeConfig(
                vectors=qe.EdgeVectorParams(size=size, distance=DISTANCES[distance])
            )
            shard = qe.EdgeShard.create(str(path), config)
            c = Collection(name=name, size=size, distance=distance, shard=shard, path=path)
            self.collections[name] = c
            return c

    def delete(self, name: str) -> bool:
        with self.lock:
            c = self.collections.pop(name, None)
            if c is None:
                return False
            for alias in [a for a, t in self.aliases.items() if t == name]:
                del self.aliases[alias]
        c.shard.close()
        shutil.rmtree(c.path, ignore_errors=True)
        return True

    def set_alias(self, alias: str, collection: str) -> None:
        with self.lock:
            if collection not in self.collections:
                raise ApiError(404, f"Not found: Collection `{collection}` doesn't exist!")
            if alias in self.collections:
                raise ApiError(409, f"Wrong input: `{alias}` is a collection, not an alias")
            self.aliases[alias] = collection

    def drop_alias(self, alias: str) -> None:
        with self.lock:
            if self.aliases.pop(alias, None) is None:
                raise ApiError(404, f"Not found: Alias `{alias}` doesn't exist!")

    def rename_alias(self, old: str, new: str) -> None:
        with self.lock:
            target = self.aliases.get(old)
            if target is None:
                raise ApiError(404, f"Not found: Alias `{old}` doesn't exist!")
            self.drop_alias(old)
            self.set_alias(new, target)

    # -- points ---------------------------------------------------------------------

    def upsert(
        self, name: str, points: Sequence[tuple[PointId, Vector, dict[str, Any] | None]]
    ) -> None:
        c = self.resolve(name)
        built = [qe.Point(i, _point_vector(v, c.size), p) for i, v, p in points]
        c.shard.update(qe.UpdateOperation.upsert_points(built))

    def delete_points(self, name: str, *, ids: list[PointId] | None, flt: Any) -> None:
        c = self.resolve(name)
        if ids is not None:
            c.shard.update(qe.UpdateOperation.delete_points(list(ids)))
        elif flt is not None:
            c.shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
        else:
            # An empty filter selects every point, as on Qdrant.
            c.shard.update(qe.UpdateOperation.delete_points_by_filter(qe.Filter()))

    def query(
        self,
        name: str,
        *,
        vector: Vector | None,
        flt: Any,
        limit: int,
        offset: int,
        payload: Any,
        vectors: bool,
        threshold: float | None,
        exact: bool,
    ) -> list[Any]:
        c = self.resolve(name)
        kw: dict[str, Any] = {
            "limit": limit,
            "offset": offset or None,
            "filter": flt,
            "with_payload": payload if payload is not None else False,
            "with_vector": vectors,
            "score_threshold": threshold,
        }
        if exact:
            kw["params"] = qe.SearchParams(exact=True)
        if vector is not None:
            kw["query"] = qe.Query.Nearest(dense_vector(vector, c.size))
        return list(c.shard.query(qe.QueryRequest(**kw)))

    def count(self, name: str, flt: Any, *, exact: bool) -> int:
        return int(self.resolve(name).shard.count(qe.CountRequest(filter=flt, exact=exact)))

    def retrieve(
        self, name: str, ids: Sequence[PointId], *, payload: Any, vectors: bool
    ) -> list[Any]:
        c = self.resolve(name)
        return list(c.shard.retrieve(list(ids), payload, vectors))

    def scroll(
        self,
        name: str,
        *,
        flt: Any,
        limit: int,
        offset: PointId | None,
        payload: Any,
        vectors: bool,
    ) -> tuple[list[Any], object]:
        c = self.resolve(name)
        req = qe.ScrollRequest(
            offset=offset,
            limit=limit,
            filter=flt,
            with_payload=payload if payload is not None else True,
            with_vector=vectors,
        )
        records, nxt = c.shard.scroll(req)
        return list(records), nxt

    def close(self) -> None:
        with self.lock:
            for c in self.collections.values():
                c.shard.close()

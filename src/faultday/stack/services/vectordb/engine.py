"""Collections and aliases over Qdrant Edge shards, with Qdrant's REST JSON shapes.

Each collection is one ``qdrant_edge.EdgeShard`` in its own folder. This module
translates the JSON that ``qdrant-client`` sends over REST (filters, ids,
queries) into qdrant-edge objects and back; the HTTP layer is ``app.py``.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import qdrant_edge as qe

DISTANCES = {
    "Cosine": qe.Distance.Cosine,
    "Euclid": qe.Distance.Euclid,
    "Dot": qe.Distance.Dot,
    "Manhattan": qe.Distance.Manhattan,
}


class ApiError(Exception):
    """An error answered to the client as Qdrant does: ``{"status": {"error": ...}}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class Collection:
    name: str
    size: int
    distance: str
    shard: Any  # qdrant_edge.EdgeShard (untyped extension)
    path: Path
    created_at: float = field(default_factory=time.time)
    payload_schema: dict[str, str] = field(default_factory=dict)


# -- JSON → qdrant-edge -------------------------------------------------------------


def point_id(raw: object) -> int | uuid.UUID:
    if isinstance(raw, bool):
        raise ApiError(400, f"bad point id {raw!r}")
    if isinstance(raw, int):
        if raw < 0:
            raise ApiError(400, f"point ids are unsigned integers or UUIDs; got {raw}")
        return raw
    if isinstance(raw, str):
        try:
            return uuid.UUID(raw)
        except ValueError as exc:
            raise ApiError(
                400, f"point id {raw!r} is neither an unsigned integer nor a UUID"
            ) from exc
    raise ApiError(400, f"bad point id {raw!r}")


def id_json(pid: object) -> int | str:
    return pid if isinstance(pid, int) else str(pid)


def _match(raw: dict[str, Any]) -> Any:
    if "value" in raw:
        return qe.MatchValue(raw["value"])
    if "any" in raw:
        return qe.MatchAny(raw["any"])
    if "except" in raw:
        return qe.MatchExcept(raw["except"])
    if "text" in raw:
        return qe.MatchText(raw["text"])
    if "phrase" in raw:
        return qe.MatchPhrase(raw["phrase"])
    raise ApiError(400, f"unsupported match {raw}")


def _condition(raw: dict[str, Any]) -> Any:
    if any(k in raw for k in ("must", "should", "must_not")):
        return to_filter(raw)
    if "has_id" in raw:
        return qe.HasIdCondition({point_id(i) for i in raw["has_id"]})
    if "is_empty" in raw:
        return qe.IsEmptyCondition(raw["is_empty"]["key"])
    if "is_null" in raw:
        return qe.IsNullCondition(raw["is_null"]["key"])
    if "nested" in raw:
        return qe.NestedCondition(raw["nested"]["key"], to_filter(raw["nested"]["filter"]))
    if "key" in raw:
        kw: dict[str, Any] = {}
        if raw.get("match") is not None:
            kw["match"] = _match(raw["match"])
        if raw.get("range") is not None:
            r = {k: v for k, v in raw["range"].items() if v is not None}
            kw["range"] = qe.RangeFloat(**r)
        if raw.get("values_count") is not None:
            vc = {k: v for k, v in raw["values_count"].items() if v is not None}
            kw["values_count"] = qe.ValuesCount(**vc)
        if raw.get("is_empty") is not None:
            kw["is_empty"] = raw["is_empty"]
        if raw.get("is_null") is not None:
            kw["is_null"] = raw["is_null"]
        unsupported = [
            k for k in ("geo_bounding_box", "geo_radius", "geo_polygon") if raw.get(k) is not None
        ]
        if unsupported:
            raise ApiError(400, f"unsupported condition: {', '.join(unsupported)}")
        return qe.FieldCondition(raw["key"], **kw)
    raise ApiError(400, f"unsupported condition {raw}")


def _conditions(raw: object) -> list[Any] | None:
    if raw is None:
        return None
    items: list[Any] = raw if isinstance(raw, list) else [raw]
    return [_condition(c) for c in items]


def to_filter(raw: dict[str, Any] | None) -> Any:
    if not raw:
        return None
    if raw.get("min_should") is not None:
        ms = raw["min_should"]
        conds = [_condition(c) for c in ms["conditions"]]
        min_should = qe.MinShould(conds, ms["min_count"])
    else:
        min_should = None
    return qe.Filter(
        must=_conditions(raw.get("must")),
        should=_conditions(raw.get("should")),
        must_not=_conditions(raw.get("must_not")),
        min_should=min_should,
    )


def dense_vector(raw: object, size: int) -> list[float]:
    if isinstance(raw, dict):
        if set(raw) == {""} or (len(raw) == 1 and "" in raw):
            raw = raw[""]
        else:
            raise ApiError(400, "named vectors are not supported by this front; use one unnamed")
    if not isinstance(raw, list) or not all(isinstance(x, int | float) for x in raw):
        raise ApiError(400, "a vector is a list of numbers")
    if len(raw) != size:
        raise ApiError(
            400, f"Wrong input: Vector dimension error: expected dim: {size}, got {len(raw)}"
        )
    return [float(x) for x in raw]


def with_payload(raw: object) -> Any:
    if raw is None:
        return None
    if isinstance(raw, bool | list):
        return raw
    if isinstance(raw, dict):
        if "include" in raw:
            return list(raw["include"])
        if "exclude" in raw:
            return qe.PayloadSelector.Exclude(list(raw["exclude"]))
    raise ApiError(400, f"unsupported with_payload {raw!r}")


def with_vector(raw: object) -> bool | list[str] | None:
    if raw is None or isinstance(raw, bool):
        return raw
    if isinstance(raw, list):
        return bool(raw)
    raise ApiError(400, f"unsupported with_vector {raw!r}")


def scored_json(p: Any, *, vectors: bool) -> dict[str, Any]:
    return {
        "id": id_json(p.id),
        "version": p.version,
        "score": p.score,
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
            path = self.root / f"{name}-{uuid.uuid4().hex[:8]}"
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

    # -- points ---------------------------------------------------------------------

    def upsert(
        self, name: str, points: Sequence[tuple[object, object, dict[str, Any] | None]]
    ) -> None:
        c = self.resolve(name)
        built = [qe.Point(point_id(i), dense_vector(v, c.size), p) for i, v, p in points]
        c.shard.update(qe.UpdateOperation.upsert_points(built))

    def delete_points(self, name: str, *, ids: list[object] | None, flt: Any) -> None:
        c = self.resolve(name)
        if ids is not None:
            c.shard.update(qe.UpdateOperation.delete_points([point_id(i) for i in ids]))
        elif flt is not None:
            c.shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
        else:
            raise ApiError(400, "delete needs 'points' or 'filter'")

    def query(
        self,
        name: str,
        *,
        vector: list[float] | None,
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

    def retrieve(self, name: str, ids: list[object], *, payload: Any, vectors: bool) -> list[Any]:
        c = self.resolve(name)
        return list(c.shard.retrieve([point_id(i) for i in ids], payload, vectors))

    def scroll(
        self, name: str, *, flt: Any, limit: int, offset: object, payload: Any, vectors: bool
    ) -> tuple[list[Any], object]:
        c = self.resolve(name)
        req = qe.ScrollRequest(
            offset=point_id(offset) if offset is not None else None,
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

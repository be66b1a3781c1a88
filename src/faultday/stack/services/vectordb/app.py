"""The Qdrant-REST-compatible HTTP front (the routes ``qdrant-client`` uses over REST).

Every answer has Qdrant's envelope ``{"result": ..., "status": "ok", "time": s}``;
errors are ``{"status": {"error": msg}, "time": s}`` with Qdrant's status codes,
so ``qdrant-client`` raises the same ``UnexpectedResponse`` it would against
the real server. ``/admin/*`` is faultday's own: it swaps the served
collection behind an alias to an empty, stale or shuffled copy (vector_degrade).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from faultday.stack.services.vectordb.engine import (
    ApiError,
    Store,
    dense_vector,
    id_json,
    record_json,
    scored_json,
    to_filter,
    with_payload,
    with_vector,
)
from faultday.stack.services.vectordb.seed import Seeder

Handler = Callable[..., Awaitable[Any]]


class Metrics:
    """Plain counters rendered as Prometheus text (no global registry)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = {}
        self.seconds: dict[str, float] = {}

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.requests[(route, status)] = self.requests.get((route, status), 0) + 1
        self.seconds[route] = self.seconds.get(route, 0.0) + seconds

    def render(self, store: Store) -> str:
        lines = [
            "# HELP rest_responses_total REST responses by route and status",
            "# TYPE rest_responses_total counter",
        ]
        for (route, status), n in sorted(self.requests.items()):
            lines.append(f'rest_responses_total{{endpoint="{route}",status="{status}"}} {n}')
        lines += ["# TYPE rest_responses_duration_seconds_sum counter"]
        for route, s in sorted(self.seconds.items()):
            lines.append(f'rest_responses_duration_seconds_sum{{endpoint="{route}"}} {s:.6f}')
        lines += ["# TYPE collections_total gauge", f"collections_total {len(store.collections)}"]
        lines += ["# TYPE collection_points gauge"]
        for name, c in sorted(store.collections.items()):
            lines.append(f'collection_points{{collection="{name}"}} {c.shard.info().points_count}')
        return "\n".join(lines) + "\n"


def _ok(result: object, started: float) -> JSONResponse:
    return JSONResponse({"result": result, "status": "ok", "time": time.perf_counter() - started})


def _update_result(op: int) -> dict[str, Any]:
    return {"operation_id": op, "status": "completed"}


def _collection_info(store: Store, name: str) -> dict[str, Any]:
    c = store.resolve(name)
    info = c.shard.info()
    return {
        "status": "green",
        "optimizer_status": "ok",
        "indexed_vectors_count": info.indexed_vectors_count,
        "points_count": info.points_count,
        "segments_count": info.segments_count,
        "config": {
            "params": {
                "vectors": {"size": c.size, "distance": c.distance},
                "shard_number": 1,
                "replication_factor": 1,
                "write_consistency_factor": 1,
                "on_disk_payload": True,
            },
            "hnsw_config": {
                "m": 16,
                "ef_construct": 100,
                "full_scan_threshold": 10000,
                "max_indexing_threads": 0,
                "on_disk": False,
            },
            "optimizer_config": {
                "deleted_threshold": 0.2,
                "vacuum_min_vector_number": 1000,
                "default_segment_number": 0,
                "max_segment_size": None,
                "memmap_threshold": None,
                "indexing_threshold": 10000,
                "flush_interval_sec": 5,
                "max_optimization_threads": None,
            },
            "wal_config": {"wal_capacity_mb": 32, "wal_segments_ahead": 0},
            "quantization_config": None,
        },
        "payload_schema": {
            k: {"data_type": v, "points": info.points_count} for k, v in c.payload_schema.items()
        },
    }


def _query_vector(body: dict[str, Any]) -> list[float] | None:
    """The dense vector of a ``/points/query`` body (plain list or ``{"nearest": ...}``)."""
    if body.get("prefetch"):
        raise ApiError(400, "prefetch is not supported by this front")
    q = body.get("query")
    if q is None:
        return None
    if isinstance(q, dict):
        if "nearest" in q:
            q = q["nearest"]
        else:
            raise ApiError(400, f"unsupported query {sorted(q)}; only nearest vectors")
    if isinstance(q, list):
        return [float(x) for x in q]
    raise ApiError(400, "query by point id or document is not supported by this front")


def build_app(store: Store, seeder: Seeder, *, version: str) -> FastAPI:  # noqa: PLR0915
    """The FastAPI application serving ``store``."""
    app = FastAPI(title="faultday qdrant front", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = Metrics()

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"status": {"error": exc.message}, "time": 0.0}, status_code=exc.status)

    @app.exception_handler(KeyError)
    async def missing_key(_request: Request, exc: KeyError) -> JSONResponse:
        msg = f"Format error in JSON body: missing field {exc}"
        return JSONResponse({"status": {"error": msg}, "time": 0.0}, status_code=400)

    @app.middleware("http")
    async def count_requests(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics.observe(path, response.status_code, time.perf_counter() - started)
        return response

    async def body_of(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw:
            return {}
        try:
            data = await request.json()
        except ValueError as exc:
            raise ApiError(400, f"Format error in JSON body: {exc}") from exc
        if not isinstance(data, dict):
            raise ApiError(400, "Format error in JSON body: expected an object")
        return data

    def sync(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        async def run(*a: Any) -> Any:
            return await run_in_threadpool(fn, *a)

        return run

    # -- service ------------------------------------------------------------------

    @app.get("/")
    async def root() -> JSONResponse:
        return JSONResponse(
            {
                "title": "qdrant - vector search engine (faultday front over qdrant-edge)",
                "version": version,
                "commit": None,
            }
        )

    @app.get("/healthz")
    @app.get("/livez")
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("healthz check passed")

    @app.get("/readyz")
    async def readyz() -> PlainTextResponse:
        if not seeder.ready:
            return PlainTextResponse("not ready: seeding", status_code=503)
        return PlainTextResponse("all shards are ready")

    @app.get("/metrics")
    async def prom() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(store), media_type="text/plain; version=0.0.4")

    # -- collections --------------------------------------------------------------

    @app.get("/collections")
    async def list_collections() -> JSONResponse:
        t = time.perf_counter()
        return _ok({"collections": [{"name": n} for n in sorted(store.collections)]}, t)

    @app.get("/collections/{name}")
    async def get_collection(name: str) -> JSONResponse:
        t = time.perf_counter()
        return _ok(await sync(_collection_info)(store, name), t)

    @app.get("/collections/{name}/exists")
    async def collection_exists(name: str) -> JSONResponse:
        t = time.perf_counter()
        return _ok({"exists": store.exists(name)}, t)

    @app.put("/collections/{name}")
    async def create_collection(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        vectors = body.get("vectors")
        if not isinstance(vectors, dict) or "size" not in vectors:
            raise ApiError(400, "only a single unnamed dense vector config is supported")
        if body.get("sparse_vectors"):
            raise ApiError(400, "sparse vectors are not supported by this front")
        await sync(
            lambda: store.create(name, size=int(vectors["size"]), distance=str(vectors["distance"]))
        )()
        return _ok(True, t)

    @app.delete("/collections/{name}")
    async def delete_collection(name: str) -> JSONResponse:
        t = time.perf_counter()
        return _ok(await sync(store.delete)(name), t)

    @app.put("/collections/{name}/index")
    async def create_index(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        c = store.resolve(name)
        schema = body.get("field_schema")
        kind = schema if isinstance(schema, str) else (schema or {}).get("type", "keyword")
        # qdrant-edge filters without an index too; the schema is recorded for get_collection.
        c.payload_schema[str(body["field_name"])] = str(kind)
        return _ok(_update_result(store.next_op()), t)

    # -- aliases ------------------------------------------------------------------

    @app.post("/collections/aliases")
    async def update_aliases(request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        for action in body.get("actions", []):
            if "create_alias" in action:
                a = action["create_alias"]
                store.set_alias(a["alias_name"], a["collection_name"])
            elif "delete_alias" in action:
                store.drop_alias(action["delete_alias"]["alias_name"])
            elif "rename_alias" in action:
                a = action["rename_alias"]
                target = store.aliases.get(a["old_alias_name"])
                if target is None:
                    raise ApiError(404, f"Not found: Alias `{a['old_alias_name']}` doesn't exist!")
                store.drop_alias(a["old_alias_name"])
                store.set_alias(a["new_alias_name"], target)
            else:
                raise ApiError(400, f"unknown alias action {sorted(action)}")
        return _ok(True, t)

    @app.get("/aliases")
    async def list_aliases() -> JSONResponse:
        t = time.perf_counter()
        aliases = [
            {"alias_name": a, "collection_name": c} for a, c in sorted(store.aliases.items())
        ]
        return _ok({"aliases": aliases}, t)

    @app.get("/collections/{name}/aliases")
    async def collection_aliases(name: str) -> JSONResponse:
        t = time.perf_counter()
        aliases = [
            {"alias_name": a, "collection_name": c}
            for a, c in sorted(store.aliases.items())
            if c == name
        ]
        return _ok({"aliases": aliases}, t)

    # -- points -------------------------------------------------------------------

    @app.put("/collections/{name}/points")
    async def upsert(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        if "points" in body:
            pts = [(p["id"], p.get("vector"), p.get("payload")) for p in body["points"]]
        elif "batch" in body:
            b = body["batch"]
            ids, vecs = b["ids"], b["vectors"]
            payloads = b.get("payloads") or [None] * len(ids)
            pts = list(zip(ids, vecs, payloads, strict=True))
        else:
            raise ApiError(400, "upsert needs 'points' or 'batch'")
        await sync(store.upsert)(name, pts)
        return _ok(_update_result(store.next_op()), t)

    @app.post("/collections/{name}/points/delete")
    async def delete_points(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        ids = body.get("points")
        flt = to_filter(body.get("filter"))
        await sync(lambda: store.delete_points(name, ids=ids, flt=flt))()
        return _ok(_update_result(store.next_op()), t)

    @app.post("/collections/{name}/points/query")
    async def query(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        points = await sync(lambda: _run_query(store, name, body))()
        return _ok({"points": points}, t)

    @app.post("/collections/{name}/points/search")
    async def search(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        body = {**body, "query": body.get("vector")}
        return _ok(await sync(lambda: _run_query(store, name, body))(), t)

    @app.post("/collections/{name}/points/count")
    async def count(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        flt = to_filter(body.get("filter"))
        n = await sync(lambda: store.count(name, flt, exact=bool(body.get("exact", True))))()
        return _ok({"count": n}, t)

    @app.post("/collections/{name}/points/scroll")
    async def scroll(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        vectors = bool(with_vector(body.get("with_vector")))

        def run() -> tuple[list[Any], object]:
            return store.scroll(
                name,
                flt=to_filter(body.get("filter")),
                limit=int(body.get("limit") or 10),
                offset=body.get("offset"),
                payload=with_payload(body.get("with_payload")),
                vectors=vectors,
            )

        records, nxt = await sync(run)()
        return _ok(
            {
                "points": [record_json(r, vectors=vectors) for r in records],
                "next_page_offset": id_json(nxt) if nxt is not None else None,
            },
            t,
        )

    @app.post("/collections/{name}/points")
    async def retrieve(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await body_of(request)
        vectors = bool(with_vector(body.get("with_vector")))
        payload = with_payload(body.get("with_payload"))
        recs = await sync(
            lambda: store.retrieve(name, body.get("ids", []), payload=payload, vectors=vectors)
        )()
        return _ok([record_json(r, vectors=vectors) for r in recs], t)

    @app.get("/collections/{name}/points/{pid}")
    async def get_point(name: str, pid: str) -> JSONResponse:
        t = time.perf_counter()
        key: object = int(pid) if pid.isdigit() else pid
        recs = store.retrieve(name, [key], payload=True, vectors=True)
        if not recs:
            raise ApiError(404, f"Not found: No point with id {pid} found")
        return _ok(record_json(recs[0], vectors=True), t)

    # -- faultday admin -----------------------------------------------------------

    @app.get("/admin/state")
    async def admin_state() -> JSONResponse:
        return JSONResponse(seeder.state())

    @app.post("/admin/degrade")
    async def admin_degrade(request: Request) -> JSONResponse:
        body = await body_of(request)
        mode = str(body.get("mode", ""))
        await sync(seeder.degrade)(mode)
        return JSONResponse(seeder.state())

    @app.post("/admin/restore")
    async def admin_restore() -> JSONResponse:
        await sync(seeder.degrade)("normal")
        return JSONResponse(seeder.state())

    @app.get("/admin/golden")
    async def admin_golden() -> JSONResponse:
        return JSONResponse({"collection": seeder.alias, "queries": seeder.golden_json()})

    return app


def _run_query(store: Store, name: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    if body.get("using") not in (None, ""):
        raise ApiError(400, "named vectors ('using') are not supported by this front")
    c = store.resolve(name)
    vector = _query_vector(body)
    if vector is not None:
        vector = dense_vector(vector, c.size)
    vectors = bool(with_vector(body.get("with_vector")))
    params = body.get("params") or {}
    hits = store.query(
        name,
        vector=vector,
        flt=to_filter(body.get("filter")),
        limit=int(body.get("limit") or 10),
        offset=int(body.get("offset") or 0),
        payload=with_payload(body.get("with_payload")),
        vectors=vectors,
        threshold=body.get("score_threshold"),
        exact=bool(params.get("exact", False)),
    )
    return [scored_json(p, vectors=vectors) for p in hits]

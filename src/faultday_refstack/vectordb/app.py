"""The Qdrant-REST-compatible HTTP front (the routes ``qdrant-client`` uses over REST).

Every answer has Qdrant's envelope ``{"result": ..., "status": "ok", "time": s}``;
errors are ``{"status": {"error": msg}, "time": s}`` with Qdrant's status codes,
so ``qdrant-client`` raises the same ``UnexpectedResponse`` it would against
the real server. ``/admin/*`` is faultday's own: it swaps the served
collection behind an alias to an empty, stale or shuffled copy (vector_degrade).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from opentelemetry.trace import Tracer
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from faultday_refstack.otel import ServerSpans
from faultday_refstack.vectordb import wire as w
from faultday_refstack.vectordb.engine import (
    Store,
    id_json,
    record_json,
    scored_json,
    to_filter,
    with_payload,
    with_vector,
)
from faultday_refstack.vectordb.seed import Seeder
from faultday_refstack.vectordb.wire import ApiError
from faultday_wire.webguard import WebGuard

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


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


def _error_body(message: str) -> dict[str, Any]:
    return {"status": {"error": message}, "time": 0.0}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(_error_body(message), status_code=status)


def _install_error_handlers(app: FastAPI) -> None:
    """Every error answers in Qdrant's envelope, routing errors and our own faults too."""

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        # Only a fault of this front lands here; it is logged with its traceback, never hidden.
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, f"Service internal error: {type(exc).__name__}: {exc}")


async def _body(request: Request, model: type[M]) -> M:
    return w.parse_body(model, await request.body())


def _query(request: Request, model: type[M]) -> M:
    # Refused as Qdrant refuses them; the values change nothing here (every update completes
    # before the answer, and nothing runs long enough for a timeout).
    return w.parse_query(model, request.query_params)


def build_app(
    store: Store,
    seeder: Seeder,
    *,
    version: str,
    listen_host: str,
    allowed_hosts: tuple[str, ...] = (),
    tracer: Tracer | None = None,
) -> FastAPI:
    """The FastAPI application serving ``store``, listening on ``listen_host``.

    Outermost sits the browser guard (faultday_wire.webguard) with ``allowed_hosts``:
    a refusal answers 403 in Qdrant's error envelope before any route runs.
    """
    app = FastAPI(title="faultday qdrant front", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = Metrics()
    _install_error_handlers(app)

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

    _service_routes(app, store, seeder, metrics, version)
    _collection_routes(app, store)
    _point_routes(app, store)
    _admin_routes(app, seeder)
    if tracer is not None:  # a SERVER span per request (faultday_refstack.otel)
        app.add_middleware(ServerSpans, tracer=tracer)
    # Added last, so outermost: a refused request reaches no route and no counter.
    app.add_middleware(
        WebGuard, listen_host=listen_host, allowed_hosts=allowed_hosts, error_body=_error_body
    )
    return app


def _service_routes(
    app: FastAPI, store: Store, seeder: Seeder, metrics: Metrics, version: str
) -> None:
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


def _collection_routes(app: FastAPI, store: Store) -> None:
    @app.get("/collections")
    async def list_collections() -> JSONResponse:
        t = time.perf_counter()
        return _ok({"collections": [{"name": n} for n in sorted(store.collections)]}, t)

    @app.get("/collections/{name}")
    async def get_collection(name: str) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        return _ok(await run_in_threadpool(_collection_info, store, name), t)

    @app.get("/collections/{name}/exists")
    async def collection_exists(name: str) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        return _ok({"exists": store.exists(name)}, t)

    @app.put("/collections/{name}")
    async def create_collection(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name, new=True)
        body = await _body(request, w.CreateCollection)
        _query(request, w.WaitTimeout)
        vectors = body.vectors
        if not isinstance(vectors, w.VectorParams):
            raise ApiError(400, "vectors: only a single unnamed dense vector is supported")
        if body.sparse_vectors or vectors.multivector_config is not None:
            raise ApiError(400, "sparse and multi vectors are not supported by this front")
        size, distance = vectors.size, vectors.distance
        await run_in_threadpool(lambda: store.create(name, size=size, distance=distance))
        return _ok(True, t)

    @app.delete("/collections/{name}")
    async def delete_collection(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        _query(request, w.WaitTimeout)
        return _ok(await run_in_threadpool(store.delete, name), t)

    @app.put("/collections/{name}/index")
    async def create_index(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        body = await _body(request, w.CreateFieldIndex)
        _query(request, w.UpdateParams)
        # qdrant-edge filters without an index too; the schema is recorded for get_collection.
        store.resolve(name).payload_schema[body.field_name] = body.schema_type
        return _ok(_update_result(store.next_op()), t)

    @app.post("/collections/aliases")
    async def update_aliases(request: Request) -> JSONResponse:
        t = time.perf_counter()
        body = await _body(request, w.ChangeAliases)
        _query(request, w.WaitTimeout)
        for action in body.actions:
            if isinstance(action, w.CreateAliasOperation):
                a = action.create_alias
                store.set_alias(a.alias_name, a.collection_name)
            elif isinstance(action, w.DeleteAliasOperation):
                store.drop_alias(action.delete_alias.alias_name)
            else:
                r = action.rename_alias
                store.rename_alias(r.old_alias_name, r.new_alias_name)
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
        w.collection_name(name)
        aliases = [
            {"alias_name": a, "collection_name": c}
            for a, c in sorted(store.aliases.items())
            if c == name
        ]
        return _ok({"aliases": aliases}, t)


def _point_routes(app: FastAPI, store: Store) -> None:
    _point_write_routes(app, store)
    _point_read_routes(app, store)


def _point_write_routes(app: FastAPI, store: Store) -> None:
    @app.put("/collections/{name}/points")
    async def upsert(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        body = w.parse_union(w.UPSERT, await request.body())
        _query(request, w.UpdateParams)
        if isinstance(body, w.PointsList):
            pts = [(p.id, p.vector, p.payload) for p in body.points]
        else:
            b = body.batch
            payloads = b.payloads or [None] * len(b.ids)
            pts = list(zip(b.ids, b.vectors, payloads, strict=True))
        await run_in_threadpool(store.upsert, name, pts)
        return _ok(_update_result(store.next_op()), t)

    @app.post("/collections/{name}/points/delete")
    async def delete_points(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        body = w.parse_union(w.POINTS_SELECTOR, await request.body())
        _query(request, w.UpdateParams)
        if isinstance(body, w.PointIdsList):
            ids, flt = body.points, None
        else:
            ids, flt = None, to_filter(body.filter)
        await run_in_threadpool(lambda: store.delete_points(name, ids=ids, flt=flt))
        return _ok(_update_result(store.next_op()), t)


def _point_read_routes(app: FastAPI, store: Store) -> None:
    @app.post("/collections/{name}/points/query")
    async def query(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        body = await _body(request, w.QueryRequest)
        _query(request, w.ReadParams)
        points = await run_in_threadpool(_run_query, store, name, body)
        return _ok({"points": points}, t)

    @app.post("/collections/{name}/points/search")
    async def search(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        body = await _body(request, w.SearchRequest)
        _query(request, w.ReadParams)
        return _ok(await run_in_threadpool(_run_query, store, name, body), t)

    @app.post("/collections/{name}/points/count")
    async def count(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        body = await _body(request, w.CountRequest)
        _query(request, w.ReadParams)
        flt = to_filter(body.filter)
        n = await run_in_threadpool(lambda: store.count(name, flt, exact=body.exact))
        return _ok({"count": n}, t)

    @app.post("/collections/{name}/points/scroll")
    async def scroll(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        body = await _body(request, w.ScrollRequest)
        _query(request, w.ReadParams)
        result = await run_in_threadpool(_run_scroll, store, name, body)
        return _ok(result, t)

    @app.post("/collections/{name}/points")
    async def retrieve(name: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        body = await _body(request, w.PointRequest)
        _query(request, w.ReadParams)
        vectors = with_vector(body.with_vector)
        payload = with_payload(body.with_payload)
        recs = await run_in_threadpool(
            lambda: store.retrieve(name, body.ids, payload=payload, vectors=vectors)
        )
        return _ok([record_json(r, vectors=vectors) for r in recs], t)

    @app.get("/collections/{name}/points/{pid}")
    async def get_point(name: str, pid: str, request: Request) -> JSONResponse:
        t = time.perf_counter()
        w.collection_name(name)
        key = w.parse_point_id(pid)
        _query(request, w.ReadParams)
        recs = store.retrieve(name, [key], payload=True, vectors=True)
        if not recs:
            raise ApiError(404, f"Not found: No point with id {pid} found")
        return _ok(record_json(recs[0], vectors=True), t)


def _admin_routes(app: FastAPI, seeder: Seeder) -> None:
    @app.get("/admin/state")
    async def admin_state() -> JSONResponse:
        return JSONResponse(seeder.state())

    @app.post("/admin/degrade")
    async def admin_degrade(request: Request) -> JSONResponse:
        body = await _body(request, w.Degrade)
        await run_in_threadpool(seeder.degrade, body.mode)
        return JSONResponse(seeder.state())

    @app.post("/admin/restore")
    async def admin_restore() -> JSONResponse:
        await run_in_threadpool(seeder.degrade, "normal")
        return JSONResponse(seeder.state())

    @app.get("/admin/golden")
    async def admin_golden() -> JSONResponse:
        return JSONResponse({"collection": seeder.alias, "queries": seeder.golden_json()})


def _run_query(
    store: Store, name: str, body: w.QueryRequest | w.SearchRequest
) -> list[dict[str, Any]]:
    c = store.resolve(name)
    if isinstance(body, w.SearchRequest):
        vector: w.QueryInput | None = body.vector
    else:
        if body.prefetch is not None:
            raise ApiError(400, "Bad request: prefetch is not supported by this front")
        if body.using not in (None, ""):
            raise ApiError(400, f"Wrong input: Not existing vector name error: {body.using}")
        vector = body.query
    if isinstance(vector, w.OtherQuery):
        raise ApiError(400, f"Bad request: {vector.kind} queries are not supported by this front")
    vectors = with_vector(body.with_vector)
    hits = store.query(
        c.name,
        vector=vector,
        flt=to_filter(body.filter),
        limit=body.limit or 10,
        offset=body.offset or 0,
        payload=with_payload(body.with_payload),
        vectors=vectors,
        threshold=body.score_threshold,
        exact=body.params is not None and body.params.exact,
    )
    return [scored_json(p, vectors=vectors) for p in hits]


def _run_scroll(store: Store, name: str, body: w.ScrollRequest) -> dict[str, Any]:
    if body.order_by is not None:
        raise ApiError(400, "Bad request: order_by is not supported by this front")
    vectors = with_vector(body.with_vector)
    records, nxt = store.scroll(
        name,
        flt=to_filter(body.filter),
        limit=body.limit or 10,
        offset=body.offset,
        payload=with_payload(body.with_payload),
        vectors=vectors,
    )
    return {
        "points": [record_json(r, vectors=vectors) for r in records],
        "next_page_offset": id_json(nxt) if nxt is not None else None,
    }

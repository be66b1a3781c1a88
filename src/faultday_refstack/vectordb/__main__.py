"""``python -m faultday_refstack.vectordb --host 127.0.0.1 --port P --data-dir DIR``."""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import uvicorn

from faultday_refstack.embedder.hashing import DIM, embed
from faultday_refstack.errors import UsageError
from faultday_refstack.otel import tracer_provider
from faultday_refstack.vectordb.app import build_app
from faultday_refstack.vectordb.engine import Store
from faultday_refstack.vectordb.seed import Seeder
from faultday_wire.webguard import allowed_hosts_from_env

log = logging.getLogger("faultday.vectordb")
SERVICE = "qdrant"  # service.name unless OTEL_SERVICE_NAME says otherwise


def api_version() -> str:
    """The Qdrant REST API level we answer with: the client release this front is tested with.

    qdrant-client warns when the server's minor version is more than one away.
    """
    try:
        major, minor, *_ = version("qdrant-client").split(".")
    except (PackageNotFoundError, ValueError):
        return "1.12.0"
    return f"{major}.{minor}.0"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m faultday_refstack.vectordb")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--data-dir", default="", help="where shards live (default: a temp dir)")
    p.add_argument("--collection", default="docs", help="the served alias; '' = do not seed")
    p.add_argument("--dim", type=int, default=DIM)
    p.add_argument("--log-level", default="info")
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        provider = tracer_provider(default_service=SERVICE)
    except UsageError as exc:
        p.error(str(exc))
    own = None if a.data_dir else tempfile.mkdtemp(prefix="faultday-qdrant-")
    root = Path(a.data_dir or str(own))
    # Each start is a fresh engine: a restarted front re-seeds, like a pod with an emptyDir.
    shutil.rmtree(root, ignore_errors=True)
    store = Store(root)
    seeder = Seeder(store, alias=a.collection or "docs", embed=lambda t: embed(t, a.dim), dim=a.dim)
    if a.collection:
        seeder.seed()
    else:
        seeder.ready = True
    app = build_app(
        store,
        seeder,
        version=api_version(),
        listen_host=a.host,
        allowed_hosts=allowed_hosts_from_env(),
        tracer=provider.get_tracer("faultday.vectordb") if provider is not None else None,
    )
    try:
        uvicorn.run(app, host=a.host, port=a.port, log_level="warning")
    finally:
        if provider is not None:
            provider.shutdown()  # flushes the spans still queued
        store.close()
        if own is not None:  # a temp folder it made itself goes with it
            shutil.rmtree(own, ignore_errors=True)


if __name__ == "__main__":
    main()

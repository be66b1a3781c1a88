"""``python -m faultday_refstack.tools --host 127.0.0.1 --port P --data-dir DIR``."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from pathlib import Path

import uvicorn
from opentelemetry import trace

from faultday_refstack.errors import UsageError
from faultday_refstack.otel import tracer_provider
from faultday_refstack.tools.server import ToolServer, ToolServerConfig
from faultday_wire.webguard import allowed_hosts_from_env

SERVICE = "tools"  # service.name unless OTEL_SERVICE_NAME says otherwise


def _env(name: str, default: str) -> str:
    return os.environ.get(f"FAULTDAY_TOOLS_{name}", default)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m faultday_refstack.tools")
    p.add_argument("--host", default=_env("HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(_env("PORT", "0")))
    p.add_argument(
        "--data-dir",
        default=_env("DATA_DIR", ""),
        help="writable folder for the report DB, outbox and records (default: a temp dir)",
    )
    p.add_argument("--concurrency", type=int, default=int(_env("CONCURRENCY", "8")))
    p.add_argument("--queue", type=int, default=int(_env("QUEUE", "16")))
    p.add_argument("--queue-timeout", type=float, default=float(_env("QUEUE_TIMEOUT", "1.0")))
    p.add_argument("--seed", type=int, default=int(_env("SEED", "0")))
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "info"))
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    own = None if a.data_dir else tempfile.mkdtemp(prefix="faultday-tools-")
    data_dir = Path(a.data_dir or str(own))
    server = ToolServer(
        ToolServerConfig(
            data_dir=data_dir,
            concurrency=a.concurrency,
            queue=a.queue,
            queue_timeout=a.queue_timeout,
            seed=a.seed,
        )
    )
    try:
        provider = tracer_provider(default_service=SERVICE)
    except UsageError as exc:
        p.error(str(exc))
    tracer = None
    if provider is not None:
        tracer = provider.get_tracer("faultday.tools")
        # The MCP SDK writes its span per message with the global provider: this process's
        # composition root is the one place that sets it.
        trace.set_tracer_provider(provider)
    try:
        app = server.app(listen_host=a.host, allowed_hosts=allowed_hosts_from_env(), tracer=tracer)
        uvicorn.run(app, host=a.host, port=a.port, log_level="warning")
    finally:
        if provider is not None:
            provider.shutdown()  # flushes the spans still queued
        if own is not None:  # a temp folder it made itself goes with it
            shutil.rmtree(own, ignore_errors=True)


if __name__ == "__main__":
    main()

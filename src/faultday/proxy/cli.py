"""``faultday proxy serve``: the fault proxy as a process (Toxiproxy's API on --port)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter, ValidationError

from faultday.errors import UsageError
from faultday.proxy.models import ProxySpec
from faultday.proxy.server import ProxyServer
from faultday.proxy.tracing import ProxyTracing, TraceSettings
from faultday_wire.webguard import allowed_hosts_from_env

app = typer.Typer(help="faultday's Toxiproxy-compatible fault proxy.", no_args_is_help=True)

READY_PREFIX = "faultday-proxy ready"


@app.callback()
def proxy() -> None:
    """faultday's Toxiproxy-compatible fault proxy."""
    # A callback keeps `serve` a subcommand even while it is the only one.


def load_config(path: Path) -> tuple[ProxySpec, ...]:
    """A Toxiproxy ``-config`` file: a JSON array of proxies."""
    try:
        raw = json.loads(path.read_text())
        return tuple(TypeAdapter(list[ProxySpec]).validate_python(raw))
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        raise UsageError(f"{path}: not a proxy list: {exc}") from exc


def serve_forever(*, host: str, port: int, config: Path | None, log_level: str) -> None:
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    proxies = load_config(config) if config else ()
    settings = TraceSettings.from_env(os.environ)
    server = ProxyServer(
        host=host,
        port=port,
        proxies=proxies,
        allowed_hosts=allowed_hosts_from_env(),
        tracing=None if settings is None else ProxyTracing(settings),
    )

    def ready(srv: ProxyServer) -> None:
        # The stack supervisor waits for this line (and then for GET /version).
        print(f"{READY_PREFIX} api={srv.api_url} proxies={len(srv.proxies)}", flush=True)

    server.run(ready)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="API address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="API port (0 = ephemeral)")] = 8474,
    config: Annotated[
        Path | None, typer.Option(help="JSON array of proxies to create at start")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
) -> None:
    """Serve Toxiproxy's HTTP API and the proxies it creates until SIGINT/SIGTERM."""
    serve_forever(host=host, port=port, config=config, log_level=log_level)

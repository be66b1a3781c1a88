"""``faultday traces serve``: the trace collector as a process (docs/traces.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from faultday.core.otlp import MAX_BODY
from faultday.core.spanstore import DEFAULT_MAX_SPANS, SPANS_DB
from faultday.observe.collector import DEFAULT_PORT, CollectorConfig, serve_forever

app = typer.Typer(help="faultday's OTLP/HTTP trace collector.", no_args_is_help=True)


@app.callback()
def traces() -> None:
    """faultday's OTLP/HTTP trace collector."""
    # A callback keeps `serve` a subcommand even while it is the only one.


@app.command()
def serve(  # noqa: PLR0917 - typer options, never called positionally
    db: Annotated[Path, typer.Option(help="the span store's SQLite file")] = Path(SPANS_DB),
    host: Annotated[str, typer.Option(help="listen address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="listen port (0 = ephemeral)")] = DEFAULT_PORT,
    max_spans: Annotated[int, typer.Option(help="spans kept at most; more are dropped")] = (
        DEFAULT_MAX_SPANS
    ),
    max_body: Annotated[int, typer.Option(help="bytes per request at most")] = MAX_BODY,
    forward: Annotated[
        list[str] | None,
        typer.Option(help="also POST every accepted body to this OTLP/HTTP URL (repeatable)"),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
) -> None:
    """Receive OTLP/HTTP traces into a span store until SIGINT/SIGTERM."""
    config = CollectorConfig(
        db=db,
        host=host,
        port=port,
        max_spans=max_spans,
        max_body=max_body,
        forward=tuple(forward or ()),
    )
    serve_forever(config, log_level=log_level)

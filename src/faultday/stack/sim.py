"""``faultday sim llm``: the reference stack's vLLM simulator, run as its own program.

The simulator belongs to the system under test (``faultday_refstack``), which
the harness only ever starts as a process; this command hands the process
over to ``python -m faultday_refstack.llmsim`` with the same arguments, so the
simulator's own options and ``--help`` are the ones shown, and signals reach
it directly (``exec``: no harness process stays in between).
"""

from __future__ import annotations

import os
import sys

import typer

SIM_MODULE = "faultday_refstack.llmsim"

app = typer.Typer(help="Simulated components of the reference stack.", no_args_is_help=True)


@app.command(
    "llm",
    add_help_option=False,  # --help goes to the simulator, which lists its options
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def llm(ctx: typer.Context) -> None:
    """Serve a vLLM-compatible OpenAI API backed by a simulated engine and GPU (see --help)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", SIM_MODULE, *ctx.args])  # noqa: S606 - argv list, no shell

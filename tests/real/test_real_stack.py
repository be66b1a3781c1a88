"""The `local-real` profile's real vLLM, brought up by faultday's own Stack API.

A new user's path: no model folder yet (the vllm component's launcher builds
the tiny model), `.venv-real` found next to the checkout, vLLM served under the
supervisor. Then the GPU dies (SIGKILL of EngineCore, what `gpu_loss` does):
vLLM exits 0, and the profile's `restart: always` brings it back on its port.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import psutil
import pytest
from tests.real.realstack import ROOT
from tests.stack.conftest import marked_processes

from faultday.core.ledger import Ledger
from faultday.core.profile import RestartPolicy, load_profile
from faultday.injectors.gpu import find_engine_core
from faultday.stack.stack import Stack
from faultday.stack.supervisor import ProcState

pytestmark = [pytest.mark.real, pytest.mark.timeout(900)]

LLM = "llm-primary"
SERVED = "sim-primary"
UP_TIMEOUT_S = 300.0


def _chat(url: str) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=60, max_retries=0)
    return client.chat.completions.create(
        model=SERVED, messages=[{"role": "user", "content": "Hello there"}], max_tokens=8
    )


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_local_real_llm_serves_through_the_stack_and_always_restarts(
    real_python: Path, tmp_path: Path, observe: Callable[[str, object], None]
) -> None:
    profile = load_profile("local-real", base_dir=ROOT).subset([LLM])
    assert list(profile.spec.components) == [LLM]  # one vLLM: nothing else is pulled in
    assert profile.spec.components[LLM].restart.policy == RestartPolicy.ALWAYS
    run_dir = tmp_path / "run"
    # The whole profile makes {run_dir}/triton (the triton component's work folder):
    # it must not shadow the triton package for vLLM and transformers.
    (run_dir / "triton").mkdir(parents=True)
    stack = Stack(profile, run_dir=run_dir, ledger=Ledger.in_dir(run_dir))
    try:
        t0 = time.monotonic()
        stack.up(timeout=UP_TIMEOUT_S)
        observe("up incl. tiny-model build, s", round(time.monotonic() - t0, 1))
        assert (run_dir / "tiny-llama" / "config.json").is_file()
        target = stack.target(LLM)
        assert target.component_type == "vllm" and target.pid is not None
        # The launcher exec'd vLLM: the supervisor's PID is the API server itself,
        # run by .venv-real's interpreter, with EngineCore under it.
        cmdline = " ".join(psutil.Process(target.pid).cmdline())
        assert "-m vllm.entrypoints.openai.api_server" in cmdline, cmdline
        assert str(real_python.parent.parent) in cmdline, cmdline
        reply = _chat(target.url)
        assert reply.model == SERVED
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert reply.usage is not None and reply.usage.completion_tokens > 0

        # GPU loss: vLLM's API server exits 0 and `always` restarts it.
        old_pid = target.pid
        find_engine_core(old_pid).kill()
        managed = stack.supervisor.managed(LLM)
        assert managed is not None
        t_kill = time.monotonic()
        deadline = t_kill + 15
        while managed.last_exit is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert managed.last_exit == 0, managed.last_exit
        observe("exit after EngineCore SIGKILL, s", round(time.monotonic() - t_kill, 2))
        deadline = t_kill + UP_TIMEOUT_S
        while time.monotonic() < deadline:
            pid = managed.pid
            if pid is not None and pid != old_pid and _healthy(target.url):
                break
            time.sleep(0.25)
        assert managed.pid != old_pid and managed.state == ProcState.RUNNING
        assert managed.restarts == 1
        observe("serving again after, s", round(time.monotonic() - t_kill, 1))
        assert _chat(target.url).model == SERVED  # same port: clients need not change
    finally:
        stack.down()
    left = marked_processes(run_dir)
    assert not left, [p.cmdline()[:4] for p in left]

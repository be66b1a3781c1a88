"""Serving behaviour a gateway relies on: versions, queue caps, aborts, prefix cache, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest
from tests.llmsim.conftest import FAST, Sim, _stop, launch

FAULTDAY = str(Path(sys.executable).with_name("faultday"))

BODY = {"prompt": "the same question", "max_tokens": 400, "seed": 3}


def test_model_version_changes_text_and_length(start_sim: Callable[..., Sim]) -> None:
    dist = ("--output-len-dist", "lognormal", "--output-len-mean", "60")
    a = start_sim(*dist, "--version", "v1")
    b = start_sim(*dist, "--version", "v2", "--output-len-mean", "120")
    ra = httpx.post(f"{a.url}/v1/completions", json=BODY, timeout=10).json()
    rb = httpx.post(f"{b.url}/v1/completions", json=BODY, timeout=10).json()
    again = httpx.post(f"{a.url}/v1/completions", json=BODY, timeout=10).json()
    assert ra["choices"][0]["text"] == again["choices"][0]["text"]
    assert ra["choices"][0]["text"] != rb["choices"][0]["text"]
    assert ra["usage"]["completion_tokens"] != rb["usage"]["completion_tokens"]


def test_queue_cap_answers_503(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--max-num-queued-reqs", "1")
    sim.fault(kind="hang")  # nothing is admitted while hung: the queue cap decides
    with httpx.stream(
        "POST", f"{sim.url}/v1/completions", json={"prompt": "first", "stream": True}, timeout=5
    ) as first:
        assert first.status_code == 200
        for _ in range(2):
            resp = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "x"}, timeout=5)
            assert resp.status_code == 503
            assert resp.json()["error"]["code"] == 503
        m = sim.metrics()
        assert m["vllm:admission_rejections_total[('reason', 'max_num_queued_reqs')]"] == 2
        assert m["vllm:admission_rejections_total[('reason', 'max_num_queued_tokens')]"] == 0
        assert m["http_requests_total[('handler', '/v1/completions'), ('method', 'POST'), "
                 "('status', '5xx')]"] == 2  # fmt: skip


def test_waiting_by_reason_sums_to_waiting(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--max-num-seqs", "1")
    body = {"prompt": "long answer", "max_tokens": 400, "ignore_eos": True, "stream": True}
    with ThreadPoolExecutor(3) as pool:
        futures = [
            pool.submit(httpx.post, f"{sim.url}/v1/completions", json=body, timeout=20)
            for _ in range(3)
        ]
        deadline = time.monotonic() + 5
        m = sim.metrics()
        while m["vllm:num_requests_waiting"] < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
            m = sim.metrics()
        assert m["vllm:num_requests_running"] == 1
        assert m["vllm:num_requests_waiting"] == 2
        assert m["vllm:num_requests_waiting_by_reason[('reason', 'capacity')]"] == 2
        assert m["vllm:num_requests_waiting_by_reason[('reason', 'deferred')]"] == 0
        assert all(f.result().status_code == 200 for f in futures)


def test_hang_accepts_new_streams_that_never_produce(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim()
    sim.fault(kind="hang")
    with httpx.stream(
        "POST",
        f"{sim.url}/v1/completions",
        json={"prompt": "x", "stream": True},
        timeout=httpx.Timeout(5, read=0.5),
    ) as resp:
        assert resp.status_code == 200  # headers at once, as vLLM's StreamingResponse
        with pytest.raises(httpx.ReadTimeout):
            next(resp.iter_lines())
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200


def test_client_disconnect_aborts_and_frees_the_slot(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--output-len-mean", "5000")
    with httpx.stream(
        "POST", f"{sim.url}/v1/completions", json={"prompt": "long", "stream": True}, timeout=5
    ) as resp:
        lines = resp.iter_lines()
        for _ in range(5):
            next(lines)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        m = sim.metrics()
        if m.get("vllm:request_success_total[('finished_reason', 'abort')]") == 1:
            break
        time.sleep(0.05)
    assert m["vllm:request_success_total[('finished_reason', 'abort')]"] == 1
    # the gauges follow engine steps; one more request makes the engine step again
    httpx.post(f"{sim.url}/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=5)
    m = sim.metrics()
    assert m["vllm:num_requests_running"] == 0
    assert m["vllm:kv_cache_usage_perc"] == 0
    assert httpx.get(f"{sim.url}/load", timeout=5).json() == {"server_load": 0}


def test_prefix_cache_hits_on_a_shared_system_prompt(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim()
    system = {"role": "system", "content": "You are the incident assistant. " * 30}
    for q in ("first question", "second question"):
        body = {"messages": [system, {"role": "user", "content": q}], "max_tokens": 2}
        assert httpx.post(f"{sim.url}/v1/chat/completions", json=body, timeout=5).is_success
    m = sim.metrics()
    assert m["vllm:prefix_cache_hits_total"] >= 16 * 10  # at least ten shared blocks
    assert m["vllm:prompt_tokens_cached_total"] == m["vllm:prefix_cache_hits_total"]
    by_source = "vllm:prompt_tokens_cached_by_source_total[('source', '{}')]"
    assert m[by_source.format("device")] == m["vllm:prefix_cache_hits_total"]
    assert m[by_source.format("host")] == 0
    # The MFU estimates move with the work done.
    assert m["vllm:estimated_flops_per_gpu_total"] > 0
    assert (
        m["vllm:estimated_read_bytes_per_gpu_total"]
        > m["vllm:estimated_write_bytes_per_gpu_total"]
        > 0
    )


def test_faultday_sim_llm_is_the_simulator_program(tmp_path: Path) -> None:
    # The harness only starts the reference stack as a process: `faultday sim llm` execs
    # `python -m faultday_refstack.llmsim` with its arguments, help included.
    shown = subprocess.run(
        [FAULTDAY, "sim", "llm", "--help"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "240"},
    )
    assert shown.returncode == 0, shown.stderr
    assert "--max-num-seqs" in shown.stdout
    assert "--exit-on-engine-death" in shown.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_num_seqs: 0\n")
    for program in ([FAULTDAY, "sim", "llm"], [sys.executable, "-m", "faultday_refstack.llmsim"]):
        proc = subprocess.run(
            [*program, "--config", str(bad)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, (program, proc.stderr)
        assert "max_num_seqs" in proc.stderr
    sim = launch(tmp_path, *FAST, name="via-faultday", program=(FAULTDAY, "sim", "llm"))
    try:
        # Exec, not a child: the PID the caller holds is the simulator's own.
        assert "faultday_refstack.llmsim" in psutil.Process(sim.proc.pid).cmdline()
        card = httpx.get(f"{sim.url}/v1/models", timeout=5).json()["data"][0]
        assert card["id"] == "test-model"
    finally:
        _stop(sim.proc)


def test_config_file_is_read(start_sim: Callable[..., Sim], tmp_path: Path) -> None:
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(json.dumps({"served_model_name": "from-file", "max_model_len": 512}))
    sim = start_sim("--config", str(cfg))
    card = httpx.get(f"{sim.url}/v1/models", timeout=5).json()["data"][0]
    assert card["id"] == "from-file"
    assert card["max_model_len"] == 512

"""The load-dependent latency model, measured on the live server."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import openai
from tests.llmsim.conftest import Sim


def ttft(oai: openai.OpenAI, prompt: str) -> float:
    start = time.monotonic()
    chunks = oai.completions.create(model="test-model", prompt=prompt, stream=True, max_tokens=40)
    first = time.monotonic()
    for i, _ in enumerate(chunks):
        if i == 0:
            first = time.monotonic()
    return first - start


def test_ttft_rises_with_waiting_queue(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--max-num-seqs", "4", "--step-base-ms", "5", "--output-len-mean", "40")
    oai = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", timeout=20, max_retries=0)
    ttft(oai, "warm up the client's connection pool")
    alone = ttft(oai, "alone")
    with ThreadPoolExecutor(max_workers=16) as pool:
        ttfts = sorted(pool.map(lambda i: ttft(oai, f"queued request {i}"), range(16)))
    # Four at a time, 40 tokens of ~5 ms each (~0.2 s): the last ones wait for earlier batches.
    assert ttfts[-1] > 0.2
    assert ttfts[-1] > 4 * alone
    m = sim.metrics()
    assert m["vllm:request_queue_time_seconds_sum"] > 0.5
    assert m["vllm:time_to_first_token_seconds_count"] == 18

"""The OpenAI-compatible surface, driven by the real ``openai`` client and plain HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.llmsim.conftest import Sim

# vLLM v1 families (PrometheusStatLogger, text model, default options) and their types.
VLLM_FAMILIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:engine_sleep_state": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:cache_config_info": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:external_prefix_cache_queries": "counter",
    "vllm:external_prefix_cache_hits": "counter",
    "vllm:mm_cache_queries": "counter",
    "vllm:mm_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:prompt_tokens_by_source": "counter",
    "vllm:prompt_tokens_cached": "counter",
    "vllm:prompt_tokens_cached_by_source": "counter",
    "vllm:num_requests_waiting_by_reason": "gauge",
    "vllm:estimated_flops_per_gpu": "counter",
    "vllm:estimated_read_bytes_per_gpu": "counter",
    "vllm:estimated_write_bytes_per_gpu": "counter",
    "vllm:admission_rejections": "counter",
    "vllm:request_num_preemptions": "histogram",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram",
    "vllm:request_params_max_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prefill_kv_computed_tokens": "histogram",
}


@pytest.fixture
def sim(start_sim: Callable[..., Sim]) -> Sim:
    return start_sim()


def client(sim: Sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", timeout=10, max_retries=0)


def test_openai_chat_stream_with_usage(sim: Sim) -> None:
    stream = client(sim).chat.completions.create(
        model="test-model",
        messages=[{"role": "user", "content": "say something"}],
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=50,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert finish == ["stop"]  # 20 tokens (fixed) < max_tokens
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 20
    assert len(text.split()) == 20


def test_openai_completion_is_deterministic_and_honours_max_tokens(sim: Sim) -> None:
    c = client(sim)
    a = c.completions.create(model="test-model", prompt="hello there", max_tokens=5, seed=7)
    b = c.completions.create(model="test-model", prompt="hello there", max_tokens=5, seed=7)
    assert a.choices[0].text == b.choices[0].text
    assert a.choices[0].finish_reason == "length"
    assert a.usage is not None
    assert a.usage.completion_tokens == 5
    streamed = "".join(
        ch.choices[0].text
        for ch in c.completions.create(
            model="test-model", prompt="hello there", max_tokens=5, seed=7, stream=True
        )
    )
    assert streamed == a.choices[0].text


def test_tool_calls_then_text_answer(sim: Sim) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "search_reports",
                "description": "search",
                "parameters": {
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["query", "limit"],
                },
            },
        }
    ]
    c = client(sim)
    msgs: list[dict[str, object]] = [{"role": "user", "content": "find the outage report"}]
    first = c.chat.completions.create(model="test-model", messages=msgs, tools=tools)  # type: ignore[arg-type]
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "search_reports"
    assert set(json.loads(call.function.arguments)) == {"query", "limit"}
    # Streaming gives the same call, in deltas.
    parts = list(
        c.chat.completions.create(
            model="test-model",
            messages=msgs,
            tools=tools,  # type: ignore[arg-type]
            stream=True,
        )
    )
    args = "".join(
        (p.choices[0].delta.tool_calls or [None])[0].function.arguments or ""  # type: ignore[union-attr]
        for p in parts
        if p.choices and p.choices[0].delta.tool_calls
    )
    assert args == call.function.arguments
    # After one tool round the model answers in text (tools.rounds = 1).
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "report 42"},
    ]
    second = c.chat.completions.create(model="test-model", messages=msgs, tools=tools)  # type: ignore[arg-type]
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content


def test_plain_endpoints_and_errors(sim: Sim) -> None:
    get = lambda p: httpx.get(sim.url + p, timeout=5)  # noqa: E731
    assert get("/health").status_code == 200
    assert get("/ping").status_code == 200
    assert "version" in get("/version").json()
    assert get("/v1/models").json()["data"][0]["id"] == "test-model"
    assert get("/load").json() == {"server_load": 0}
    tok = httpx.post(sim.url + "/tokenize", json={"prompt": "hello world"}, timeout=5).json()
    assert tok["count"] == len(tok["tokens"]) > 0
    with pytest.raises(openai.NotFoundError):
        client(sim).completions.create(model="no-such-model", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as err:
        client(sim).completions.create(model="test-model", prompt="x", max_tokens=10**6)
    assert "maximum context length" in str(err.value)


def test_errors_have_vllm_shapes(sim: Sim) -> None:
    """Validation errors, unknown paths and methods answer as vLLM 0.32 (FastAPI) does."""
    resp = httpx.post(f"{sim.url}/v1/chat/completions", json={"model": "test-model"}, timeout=5)
    assert resp.status_code == 400
    assert resp.json() == {
        "error": {
            "message": "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', "
            "'msg': 'Field required', 'input': '<dict of 1 items>'}",
            "type": "Bad Request",
            "param": "body.messages",
            "code": 400,
        }
    }
    resp = httpx.post(
        f"{sim.url}/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
        timeout=5,
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "Bad Request"
    assert resp.json()["error"]["param"] == "body.1"
    resp = httpx.post(f"{sim.url}/v1/completions", json={"model": "test-model"}, timeout=5)
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "BadRequestError"
    assert resp.json()["error"]["param"] == "prompt"
    nope = httpx.get(f"{sim.url}/no/such/path", timeout=5)
    assert (nope.status_code, nope.json()) == (404, {"detail": "Not Found"})
    wrong = httpx.get(f"{sim.url}/v1/completions", timeout=5)
    assert (wrong.status_code, wrong.json()) == (405, {"detail": "Method Not Allowed"})


def test_http_families_count_requests_like_the_instrumentator(sim: Sim) -> None:
    good = json.dumps({"model": "test-model", "prompt": "count me", "max_tokens": 3}).encode()
    bad = json.dumps({"model": "other", "prompt": "count me", "max_tokens": 3}).encode()
    headers = {"content-type": "application/json"}
    ok = httpx.post(f"{sim.url}/v1/completions", content=good, headers=headers, timeout=5)
    httpx.post(f"{sim.url}/v1/completions", content=bad, headers=headers, timeout=5)
    httpx.get(f"{sim.url}/no/such/path", timeout=5)
    for path in ("/health", "/ping", "/version", "/load", "/metrics"):
        httpx.get(f"{sim.url}{path}", timeout=5)
    m = sim.metrics()
    key = "http_requests_total[('handler', '/v1/completions'), ('method', 'POST'), ('status', {})]"
    assert m[key.format("'2xx'")] == 1
    assert m[key.format("'4xx'")] == 1
    assert m["http_requests_total[('handler', 'none'), ('method', 'GET'), ('status', '4xx')]"] == 1
    # Probes and /metrics are not counted, as in vLLM.
    assert not [k for k in m if k.startswith("http_requests_total") and "/health" in k]
    assert m["http_request_size_bytes_count[('handler', '/v1/completions')]"] == 2
    assert m["http_request_size_bytes_sum[('handler', '/v1/completions')]"] == len(good) + len(bad)
    assert m["http_response_size_bytes_sum[('handler', '/v1/completions')]"] > len(ok.content)
    assert m["http_request_duration_highr_seconds_count"] == 3
    dur = "http_request_duration_seconds_count[('handler', '/v1/completions'), ('method', 'POST')]"
    assert m[dur] == 2


def test_metrics_families_types_and_labels(sim: Sim) -> None:
    client(sim).completions.create(model="test-model", prompt="count me", max_tokens=3)
    text = httpx.get(f"{sim.url}/metrics", timeout=5).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # prometheus_client's parser reports each counter's/histogram's ``_created`` series as a
    # gauge family of its own; vLLM exports them the same way (prometheus_client default).
    vllm = {
        n: f.type
        for n, f in families.items()
        if n.startswith("vllm:") and not n.endswith("_created")
    }
    assert vllm == VLLM_FAMILIES
    for name, fam in families.items():
        if name.startswith("vllm:") and name != "vllm:cache_config_info":
            for s in fam.samples:
                assert s.labels["model_name"] == "test-model"
                # The API server rejects at admission, before any engine: no engine label.
                if not name.startswith("vllm:admission_rejections"):
                    assert s.labels["engine"] == "0"
    m = sim.metrics()
    assert m["vllm:generation_tokens_total"] == 3
    assert m["vllm:request_success_total[('finished_reason', 'length')]"] == 1
    assert m["vllm:time_to_first_token_seconds_count"] == 1
    assert m["vllm:inter_token_latency_seconds_count"] == 2
    assert m["vllm:prompt_tokens_total"] > 0

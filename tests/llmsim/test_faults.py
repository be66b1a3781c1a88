"""GPU faults through /admin/faults: what a client, /health, /metrics and the log see."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import openai
import pytest
from tests.llmsim.conftest import Sim

LONG = ("--output-len-mean", "5000")  # answers far longer than any test waits for


@dataclass
class RawStream:
    """An SSE stream read on a thread; every data payload with its arrival time."""

    sim: Sim
    body: dict[str, object]
    events: list[tuple[float, str]] = field(default_factory=list)
    status: int = 0
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self) -> RawStream:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            with httpx.stream(
                "POST",
                f"{self.sim.url}/v1/completions",
                json=self.body,
                timeout=httpx.Timeout(10, read=10),
            ) as resp:
                self.status = resp.status_code
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        self.events.append((time.monotonic(), line[6:]))
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc

    def tokens(self) -> int:
        """Tokens received: one word each (a slow reader may get several in one event)."""
        return sum(
            len(json.loads(d)["choices"][0]["text"].split())
            for _, d in self.events
            if d.startswith('{"id"')
        )

    def wait_tokens(self, n: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while self.tokens() < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.tokens() >= n, f"only {self.tokens()} tokens: {self.events[-3:]}"

    def join(self, timeout: float = 10) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "stream did not end"


def stream(sim: Sim, **extra: object) -> RawStream:
    body: dict[str, object] = {"model": "test-model", "prompt": "tell me", "stream": True, **extra}
    return RawStream(sim, body).start()


def test_xid_kills_engine_streams_get_error_frame_new_requests_500_then_exit(
    start_sim: Callable[..., Sim],
) -> None:
    sim = start_sim(*LONG)
    raw = stream(sim)
    oai = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", timeout=10, max_retries=0)
    oai_stream = oai.completions.create(model="test-model", prompt="hi", stream=True)
    first = next(iter(oai_stream))
    assert first.choices[0].text
    raw.wait_tokens(5)

    sim.fault(kind="xid", xid=79)
    # The in-flight stream: one error frame, then [DONE]; its HTTP status was already 200.
    raw.join()
    assert raw.status == 200
    assert raw.error is None
    assert raw.events[-1][1] == "[DONE]"
    err = json.loads(raw.events[-2][1])
    assert err == {
        "error": {
            "message": err["error"]["message"],
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
    assert err["error"]["message"].startswith("EngineCore encountered an issue.")
    # The openai client sees the error frame as an APIError mid-stream.
    with pytest.raises(openai.APIError, match="EngineCore encountered an issue"):
        for _ in oai_stream:
            pass
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 503
    resp = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "x", "max_tokens": 3}, timeout=5)
    assert resp.status_code == 500
    assert resp.json()["error"]["type"] == "InternalServerError"
    # Then the API server exits, as vLLM's does, and it stops accepting connections. Its
    # exit status is 0, as vLLM's is: an on-failure restart policy does not fire.
    assert sim.wait_exit(timeout=6) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.url}/health", timeout=2)
    assert "NVRM: Xid (PCI:0000:01:00): 79, pid=" in sim.log_text()
    assert "GPU has fallen off the bus." in sim.log_text()


def test_oom_with_keep_alive_stays_up_but_dead(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--keep-alive-on-engine-death")
    sim.fault(kind="oom")
    resp = httpx.post(
        f"{sim.url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}]},
        timeout=5,
    )
    assert resp.status_code == 500
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 503
    assert sim.wait_exit(timeout=2.5) is None  # two watchdog periods: still running
    faults = httpx.get(f"{sim.url}/admin/faults", timeout=5).json()
    assert faults["engine"] == "dead"
    assert faults["death_reason"] == "CUDA out of memory"
    assert "torch.OutOfMemoryError: CUDA out of memory" in sim.log_text()


def test_hang_keeps_health_200_while_tokens_stop_then_resumes(
    start_sim: Callable[..., Sim],
) -> None:
    sim = start_sim("--output-len-mean", "400")
    raw = stream(sim, max_tokens=400)
    raw.wait_tokens(5)
    running_before = sim.metrics()["vllm:num_requests_running"]
    fault = sim.fault(kind="hang")
    time.sleep(0.1)
    n0 = raw.tokens()
    for _ in range(5):
        assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200
        time.sleep(0.1)
    assert raw.tokens() == n0, "tokens kept coming during a hang"
    assert httpx.get(f"{sim.url}/admin/faults", timeout=5).json()["engine"] == "hung"
    assert sim.metrics()["vllm:num_requests_running"] == running_before  # frozen, not zero
    assert "NVRM: Xid (PCI:0000:01:00): 119" in sim.log_text()
    resp = httpx.delete(f"{sim.url}/admin/faults/{fault['id']}", timeout=5)
    assert resp.json()["cleared"] == [fault["id"]]
    raw.join()
    assert raw.events[-1][1] == "[DONE]"
    assert raw.tokens() == 400
    assert json.loads(raw.events[-2][1])["choices"][0]["finish_reason"] == "length"


def _mean_itl(sim: Sim) -> tuple[float, float]:
    m = sim.metrics()
    return m["vllm:inter_token_latency_seconds_sum"], m["vllm:inter_token_latency_seconds_count"]


def test_throttle_multiplies_inter_token_latency(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim("--step-base-ms", "10", "--output-len-mean", "400")
    oai = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", timeout=10, max_retries=0)
    chunks = oai.completions.create(model="test-model", prompt="go", stream=True, max_tokens=400)
    it = iter(chunks)
    for _ in range(20):
        next(it)
    s0, c0 = _mean_itl(sim)
    sim.fault(kind="throttle", factor=3)
    for _ in range(5):  # tokens already in flight when the fault landed
        next(it)
    s1, c1 = _mean_itl(sim)
    for _ in range(30):
        next(it)
    s2, c2 = _mean_itl(sim)
    chunks.close()
    normal = s0 / c0
    throttled = (s2 - s1) / (c2 - c1)
    # Metrics run on the simulated clock: one 10 ms (+0.05 ms) decode step per token.
    assert normal == pytest.approx(0.01005, rel=0.05)
    assert throttled == pytest.approx(3 * normal, rel=0.1)


def test_kv_shrink_causes_preemptions_and_requests_still_finish(
    start_sim: Callable[..., Sim],
) -> None:
    sim = start_sim("--num-gpu-blocks", "512", "--block-size", "16", "--output-len-mean", "300")
    streams = [stream(sim, prompt=f"request number {i} " * 20, max_tokens=300) for i in range(8)]
    for s in streams:
        s.wait_tokens(20)
    assert sim.metrics()["vllm:num_preemptions_total"] == 0
    sim.fault(kind="kv_shrink", factor=0.1)
    for s in streams:
        s.join(timeout=20)
    m = sim.metrics()
    assert m["vllm:num_preemptions_total"] > 0
    assert all(s.tokens() == 300 and s.events[-1][1] == "[DONE]" for s in streams)
    assert m["vllm:request_success_total[('finished_reason', 'length')]"] == 8
    # Per request too: every finished request observed its own preemption count.
    assert m["vllm:request_num_preemptions_count"] == 8
    assert m["vllm:request_num_preemptions_sum"] == m["vllm:num_preemptions_total"]
    assert "NVRM: Xid (PCI:0000:01:00): 63" in sim.log_text()


def test_ecc_sbe_is_logged_and_counted_without_effect(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim()
    sim.fault(kind="ecc_sbe")
    faults = httpx.get(f"{sim.url}/admin/faults", timeout=5).json()
    assert faults["engine"] == "running"
    assert faults["ecc_sbe_errors"] == 1
    resp = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "x", "max_tokens": 3}, timeout=5)
    assert resp.status_code == 200
    assert "NVRM: Xid (PCI:0000:01:00): 92" in sim.log_text()


def test_bad_fault_bodies_are_400(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim()
    for body in ({"kind": "melt"}, {"kind": "throttle", "factor": 0.5}, {"kind": "hang", "x": 1}):
        resp = httpx.post(f"{sim.url}/admin/faults", json=body, timeout=5)
        assert resp.status_code == 400, body
        assert resp.json()["error"]["type"] == "BadRequestError"

"""The simulator's spans are vLLM 0.32's: one ``llm_request`` per finished request (issue 26)."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator

import httpx
import pytest
from tests.llmsim.conftest import Sim, _stop
from tests.refstack.otlp import Got, Receiver, receiver

pytestmark = pytest.mark.timeout(90)

LATENCIES = (
    "gen_ai.latency.time_in_queue",
    "gen_ai.latency.time_to_first_token",
    "gen_ai.latency.e2e",
    "gen_ai.latency.time_in_model_prefill",
    "gen_ai.latency.time_in_model_decode",
    "gen_ai.latency.time_in_model_inference",
)


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


@pytest.fixture
def rx(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A receiver, and the environment every simulator started in the test exports to it."""
    with receiver() as r:
        for k, v in r.env("llm-primary").items():
            monkeypatch.setenv(k, v)
        yield r


def spans_of(rx: Receiver, trace_id: str, count: int = 1) -> list[Got]:
    got = rx.wait(lambda s: sum(x.trace_id == trace_id for x in s) >= count)
    return [s for s in got if s.trace_id == trace_id]


def test_llm_request_span_is_vllms(rx: Receiver, start_sim: Callable[..., Sim]) -> None:
    sim = start_sim()
    header, trace_id, caller = traceparent()
    body = {
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 16,
        "temperature": 0.5,
    }
    r = httpx.post(
        f"{sim.url}/v1/chat/completions", json=body, headers={"traceparent": header}, timeout=10
    )
    assert r.status_code == 200, r.text
    (span,) = spans_of(rx, trace_id)
    assert (span.name, span.kind, span.status, span.parent_id) == (
        "llm_request",
        "SERVER",
        "UNSET",
        caller,
    )
    assert span.scope == "vllm.tracing.otel" and span.service == "llm-primary"
    assert span.resource["vllm.instrumenting_module_name"] == "vllm.llm_engine"
    a = span.attrs
    usage = r.json()["usage"]
    assert a["gen_ai.request.id"] == r.json()["id"]
    assert a["gen_ai.usage.prompt_tokens"] == usage["prompt_tokens"]
    assert a["gen_ai.usage.completion_tokens"] == usage["completion_tokens"]
    assert a["gen_ai.request.max_tokens"] == 16
    assert a["gen_ai.request.temperature"] == 0.5 and a["gen_ai.request.top_p"] == 1.0
    assert a["gen_ai.request.n"] == 1
    assert all(isinstance(a[k], float) and a[k] >= 0 for k in LATENCIES)
    ttft, queue, prefill = (
        a[f"gen_ai.latency.{k}"]
        for k in ("time_to_first_token", "time_in_queue", "time_in_model_prefill")
    )
    assert ttft == pytest.approx(queue + prefill)
    assert a["gen_ai.latency.time_in_model_inference"] == pytest.approx(
        prefill + a["gen_ai.latency.time_in_model_decode"]
    )
    # Seconds, from the request's arrival: the span lasts exactly e2e.
    assert (span.end_ns - span.start_ns) / 1e9 == pytest.approx(a["gen_ai.latency.e2e"], abs=1e-6)
    assert 0 < a["gen_ai.latency.e2e"] < r.elapsed.total_seconds()


def test_each_prompt_and_sample_is_a_span_with_vllms_request_id(
    rx: Receiver, start_sim: Callable[..., Sim]
) -> None:
    sim = start_sim()
    header, trace_id, caller = traceparent()
    body = {"prompt": ["one", "two"], "n": 2, "max_tokens": 8, "stream": True}
    with httpx.stream(
        "POST", f"{sim.url}/v1/completions", json=body, headers={"traceparent": header}, timeout=10
    ) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    first = lines[0]
    base = first.split('"id":"', 1)[1].split('"', 1)[0]
    spans = spans_of(rx, trace_id, 4)
    assert (
        sorted(s.attrs["gen_ai.request.id"] for s in spans) == [f"{base}-0"] * 2 + [f"{base}-1"] * 2
    )
    assert {s.parent_id for s in spans} == {caller}


def test_a_request_without_traceparent_is_a_root_span(
    rx: Receiver, start_sim: Callable[..., Sim]
) -> None:
    sim = start_sim()
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    r = httpx.post(f"{sim.url}/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 200
    got = rx.wait(lambda s: any(x.attrs.get("gen_ai.request.id") == r.json()["id"] for x in s))
    (span,) = [s for s in got if s.attrs.get("gen_ai.request.id") == r.json()["id"]]
    assert span.parent_id == "" and len(span.trace_id) == 32


def test_requests_that_never_finish_leave_no_span_as_in_vllm(
    rx: Receiver, start_sim: Callable[..., Sim]
) -> None:
    sim = start_sim("--keep-alive-on-engine-death")
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}

    def post(header: str, timeout: float = 10) -> httpx.Response:
        return httpx.post(
            f"{sim.url}/v1/chat/completions",
            json=chat,
            headers={"traceparent": header},
            timeout=timeout,
        )

    # Hung: the client gives up, vLLM aborts the request and writes nothing.
    sim.fault(kind="hang")
    hung, hung_trace, _ = traceparent()
    with pytest.raises(httpx.TimeoutException):
        post(hung, timeout=0.5)
    sim.clear()
    ok, ok_trace, _ = traceparent()
    assert post(ok).status_code == 200
    spans_of(rx, ok_trace)
    # Dead: the answer is vLLM's 500, and no span.
    sim.fault(kind="xid", xid=79)
    dead, dead_trace, _ = traceparent()
    assert post(dead).status_code == 500
    _stop(sim.proc)  # SIGTERM: the simulator flushes what it queued on its way out
    traces = {s.trace_id for s in rx.snapshot()}
    assert ok_trace in traces and hung_trace not in traces and dead_trace not in traces


def test_vllms_flag_enables_export_and_a_bad_protocol_is_refused(
    start_sim: Callable[..., Sim], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    with receiver() as rx:
        sim = start_sim("--otlp-traces-endpoint", rx.url)
        header, trace_id, _ = traceparent()
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        r = httpx.post(
            f"{sim.url}/v1/chat/completions", json=body, headers={"traceparent": header}, timeout=10
        )
        assert r.status_code == 200
        (span,) = spans_of(rx, trace_id)
        assert span.service == "unknown_service"  # no OTEL_SERVICE_NAME: as vLLM's resource
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    done = subprocess.run(
        [sys.executable, "-m", "faultday_refstack.llmsim", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='grpc'" in done.stderr
    assert "Traceback" not in done.stderr

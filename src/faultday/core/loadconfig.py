"""The load generator's configuration: built by the harness, read by the locustfile child.

It travels to the child as JSON in the ``FAULTDAY_LOAD`` environment variable,
so the child needs nothing from the harness but this module (no gevent-unsafe
imports on either side).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

ENV_VAR = "FAULTDAY_LOAD"


class Workload(StrEnum):
    CHAT = "chat"  # POST /v1/chat, rag=false
    RAG = "rag"  # POST /v1/chat, rag=true
    AGENT = "agent"  # POST /v1/tasks, then GET /v1/tasks/{id} until it ends
    MIXED = "mixed"  # chat, rag and agent by weight
    HTTP = "http"  # one configurable request on any component
    NONE = "none"  # no load


class Shape(StrEnum):
    CONSTANT = "constant"
    RAMP = "ramp"
    STEP = "step"
    SPIKE = "spike"
    # Constant users for the whole run, plus per-component RSS and open-FD sampling
    # (docs/soak.md): the shape the drift check is meant for.
    SOAK = "soak"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HttpRequestSpec(_Model):
    """The request of the ``http`` workload (also how load reaches the LLM simulator)."""

    target: str = Field(default="agent", description="component whose base URL is used")
    path: str = "/health"
    method: Literal["GET", "POST"] = "GET"
    body: JsonValue = None
    stream: bool = Field(default=False, description="read the body as SSE (TTFT, ITL)")


class AnswerSampling(_Model):
    """Which answers the load quotes: in each time slot, every answer up to ``cap``, then a
    reservoir sample of ``cap`` (each answer equally likely to stay). Labels are for all."""

    cap: int = Field(default=20, ge=0, le=1000, description="answers kept per slot and process")
    text_bytes: int = Field(default=200, ge=1, le=4096, description="first bytes of an answer")
    edges: tuple[float, ...] = Field(
        default=(0.0,), description="scenario seconds where slots begin (the windows' bounds)"
    )
    canned: tuple[str, ...] = Field(default=(), description="fallback texts no model wrote")


class TracePropagation(_Model):
    """Whether the load's requests carry a W3C ``traceparent``, and the share sampled
    (flag 01; the others carry 00). From the scenario's ``traces:`` block."""

    enabled: bool = Field(default=True, description="false: no traceparent header at all")
    sample: float = Field(default=1.0, ge=0, le=1, description="share of traces sampled")


class ShapeSpec(_Model):
    """Users over time. Times are scenario seconds from t=0 (the end of warm-up)."""

    kind: Shape = Shape.CONSTANT
    users: int = Field(ge=0)
    spawn_rate: float = Field(gt=0)
    step_users: int | None = None
    step_every: float | None = None
    spike_users: int | None = None
    spike_at: float | None = None
    spike_duration: float | None = None


class LoadConfig(_Model):
    """Everything the child needs. Times here are REAL seconds (already time-scaled)."""

    workload: Workload
    shape: ShapeSpec
    sink: str = Field(description="host:port of the harness' event socket")
    base_urls: dict[str, str] = Field(description="component → base URL")
    http: HttpRequestSpec = Field(default_factory=HttpRequestSpec)
    t0_wall: float = Field(description="wall-clock time of scenario t=0 (the end of warm-up)")
    duration: float = Field(gt=0, description="real seconds from t=0 to the end of the run")
    time_scale: float = Field(default=1.0, gt=0)
    max_requests: int | None = Field(default=None, ge=1, description="cap for THIS process")
    request_timeout: float = Field(default=30.0, gt=0, description="real seconds per request")
    task_timeout: float = Field(default=120.0, gt=0, description="real seconds a task may take")
    poll_interval: float = Field(default=0.25, gt=0, description="real seconds between task polls")
    weights: dict[str, int] = Field(default_factory=lambda: {"chat": 5, "rag": 3, "agent": 2})
    agent: str = Field(default="report", description="agent that runs submitted tasks")
    think_time: float = Field(default=0.0, ge=0, description="real seconds between requests")
    seed: int = 0
    answers: AnswerSampling = Field(default_factory=AnswerSampling)
    traces: TracePropagation = Field(default_factory=TracePropagation)

    @property
    def end_wall(self) -> float:
        """Wall-clock time after which the child sends nothing (run end plus a little slack)."""
        return self.t0_wall + self.duration + 1.0

    def scenario_time(self, wall: float) -> float:
        """Scenario seconds from t=0 at wall-clock time ``wall``."""
        return (wall - self.t0_wall) / self.time_scale


def users_at(shape: ShapeSpec, t: float, *, duration: float) -> int:
    """Users wanted at scenario time ``t`` (negative during warm-up)."""
    if shape.kind == Shape.RAMP:
        if t <= 0 or duration <= 0:
            return min(shape.users, 1) if shape.users else 0
        return max(1, min(shape.users, round(shape.users * t / duration)))
    if shape.kind == Shape.STEP:
        step = shape.step_users or max(1, shape.users // 4)
        every = shape.step_every or max(duration / 4, 1e-3)
        n = 1 + max(0, int(t // every)) if t >= 0 else 1
        return min(shape.users, step * n)
    if shape.kind == Shape.SPIKE and shape.spike_at is not None:
        peak = shape.spike_users or shape.users * 4
        length = shape.spike_duration if shape.spike_duration is not None else duration / 10
        if shape.spike_at <= t < shape.spike_at + length:
            return peak
    return shape.users

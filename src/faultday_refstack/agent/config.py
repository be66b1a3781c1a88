"""``stack/agent.yaml``: the runtime's resilience policies, validated at start-up.

Timeouts are checked as a hierarchy (model call < tool call < task; a chat
request leaves room for the backup model), so a policy that could never work
is refused before the runtime serves anything.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from faultday_refstack.durations import Duration
from faultday_refstack.errors import ConfigError, Problem
from faultday_refstack.yamlfile import parse_file, validation_problems

# What one task may carry, so that no request occupies the stack for long: each step is
# a tool call (bounded by timeouts.tool_call) and a checkpoint that rewrites the whole task.
MAX_STEPS = 32
MAX_ARGS = 32  # arguments per step, and keys of an object argument
MAX_ARG_CHARS = 16_000  # a string argument: a playbook's "{goal}" (4000) and room around it
MAX_NAME_CHARS = 64  # a tool, an agent or an argument name


def _unicode(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"not Unicode text: an unpaired surrogate at index {exc.start}") from exc
    return value


# JSON may escape an unpaired UTF-16 surrogate ("\ud800"); Python decodes it into a str that
# no encoder takes, so Redis, the model client or the audit log would fail on it later.
Text = Annotated[str, AfterValidator(_unicode)]
Name = Annotated[Text, Field(min_length=1, max_length=MAX_NAME_CHARS)]
ArgText = Annotated[Text, Field(max_length=MAX_ARG_CHARS)]
ArgValue = ArgText | int | float | bool | Annotated[dict[Name, ArgText], Field(max_length=MAX_ARGS)]


class _Model(BaseModel):
    # NaN and Infinity parse from JSON but are not JSON: a checkpoint would not load back.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Timeouts(_Model):
    model_call: Duration = Field(description="one LLM call (one attempt)")
    tool_call: Duration = Field(description="one tool call (one attempt)")
    task: Duration = Field(description="a whole agent task, every step included")
    request: Duration = Field(description="a whole chat request at the gateway")
    redis: Duration = Field(description="one Redis command")
    embed: Duration = Field(description="one embedder call")
    vector: Duration = Field(description="one vector search")
    wait: Duration = Field(description="cap on any wait for another task's result")


class Retries(_Model):
    attempts: int = Field(ge=1, le=20, description="attempts in all, the first included")
    backoff_initial: Duration
    backoff_max: Duration
    jitter: Duration
    budget_ratio: float | None = Field(
        ge=0, le=10, description="retries allowed per request (token bucket); null = no budget"
    )
    budget_min_per_s: float = Field(default=1.0, ge=0)


class Breakers(_Model):
    enabled: bool
    threshold: int = Field(default=5, ge=1, description="consecutive failures that open it")
    reset_after: Duration = Field(default=5.0, description="open → half-open after this")


class Admission(_Model):
    max_in_flight: int = Field(ge=1)
    max_queue: int = Field(ge=0)
    queue_timeout: Duration
    retry_after: Duration


class Policy(_Model):
    timeouts: Timeouts
    retries: Retries
    breakers: Breakers
    fallback: bool = Field(description="run the fallback chains; false = fail on first loss")
    admission: Admission

    @model_validator(mode="after")
    def _hierarchy(self) -> Self:
        t = self.timeouts
        if not t.model_call < t.tool_call < t.task:
            raise ValueError(
                "timeouts must nest: model_call < tool_call < task "
                f"(got {t.model_call:g}s, {t.tool_call:g}s, {t.task:g}s)"
            )
        if self.fallback and t.request < 2 * t.model_call:
            raise ValueError(
                f"timeouts.request ({t.request:g}s) must leave room for the backup model: "
                f"at least 2 x model_call ({2 * t.model_call:g}s)"
            )
        if t.request < t.model_call:
            raise ValueError("timeouts.request must be at least timeouts.model_call")
        if t.wait > t.task:
            raise ValueError("timeouts.wait must not exceed timeouts.task")
        if self.retries.backoff_initial > self.retries.backoff_max:
            raise ValueError("retries.backoff_initial must not exceed retries.backoff_max")
        return self


class Step(_Model):
    tool: Name
    args: dict[Name, ArgValue] = Field(default_factory=dict, max_length=MAX_ARGS)


class AgentSpec(_Model):
    tools: list[str] = Field(description="the tool allowlist (least privilege)")
    system: str = "You are a helpful operations assistant. Use tools when they help."
    # Used when the LLM proposes no usable plan: a deterministic, reviewed plan.
    playbook: list[Step] = Field(default_factory=list, max_length=MAX_STEPS)


class CanaryKey(StrEnum):
    REQUEST = "request"  # each request draws on its own (trace id): the share is of requests
    SESSION = "session"  # a conversation stays on one version: the share is of sessions


class Canary(_Model):
    """A second model version behind ``--llm-canary`` that takes a share of chat traffic."""

    model: str = Field(description="the model name sent to llm-canary")
    share: float = Field(default=0.0, ge=0, le=1, description="share at start; admin API sets it")
    max_tokens: int | None = Field(
        default=None, ge=1, le=4096, description="the version's own budget; default models'"
    )
    key: CanaryKey = Field(default=CanaryKey.REQUEST, description="what the split hashes")
    seed: int = Field(default=0, description="seeds the hash, so a split is reproducible")


class Models(_Model):
    primary: str
    backup: str
    max_tokens: int = Field(default=128, ge=1, le=4096)
    canary: Canary | None = None


class Embedder(_Model):
    model: str
    input_name: str = "TEXT"
    output_name: str = "EMBEDDING"


class Vector(_Model):
    collection: str
    top_k: int = Field(default=3, ge=1, le=50)


class AgentConfig(_Model):
    version: Literal[1]
    models: Models
    embedder: Embedder
    vector: Vector
    canned_answer: str
    history_turns: int = Field(default=6, ge=0, le=100)
    workers: int = Field(default=4, ge=1, le=64, description="task executors in this runtime")
    secret_keys: list[str] = Field(
        default_factory=lambda: ["password", "token", "secret", "api_key", "authorization"],
        description="argument names whose values the audit log redacts",
    )
    agents: dict[str, AgentSpec]
    policies: dict[str, Policy]

    @model_validator(mode="after")
    def _names(self) -> Self:
        if "default" not in self.policies:
            raise ValueError("policies must define 'default'")
        if "planner" not in self.agents:
            raise ValueError("agents must define 'planner' (multi-agent tasks)")
        for name, spec in self.agents.items():
            for step in spec.playbook:
                if step.tool not in spec.tools:
                    raise ValueError(
                        f"agents.{name}.playbook uses {step.tool!r}, not in its allowlist"
                    )
        return self


def load_config(path: Path) -> AgentConfig:
    """Parse and validate agent.yaml; every problem is reported with file:line:col."""
    doc = parse_file(path)
    try:
        return AgentConfig.model_validate(doc.data)
    except ValidationError as exc:
        raise ConfigError(validation_problems(doc, exc)) from exc


def select_policy(cfg: AgentConfig, name: str, *, file: str) -> Policy:
    if name not in cfg.policies:
        valid = ", ".join(sorted(cfg.policies))
        raise ConfigError([Problem(file, 1, 1, "policies", f"no policy {name!r}; valid: {valid}")])
    return cfg.policies[name]

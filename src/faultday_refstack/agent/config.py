"""``stack/agent.yaml``: the runtime's resilience policies, validated at start-up.

The policies are :mod:`faultday_wire.policy`'s model, the one ``faultday lint``
reads too; a policy with a contradiction (timeouts that do not nest, a chat
request with no room for the backup model) is refused before the runtime serves
anything.
"""

from __future__ import annotations

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

from faultday_refstack.errors import ConfigError
from faultday_refstack.yamlfile import parse_file, validation_problems
from faultday_wire.llm import Models
from faultday_wire.policy import Policy, contradictions
from faultday_wire.problems import Problem

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


def _consistent(policy: Policy) -> Policy:
    found = contradictions(policy)
    if found:
        raise ValueError("; ".join(f"{'.'.join(c.path)}: {c.message}" for c in found))
    return policy


# The harness's lint reads a policy with the same model; the agent refuses a contradiction.
CheckedPolicy = Annotated[Policy, AfterValidator(_consistent)]


class Step(_Model):
    tool: Name
    args: dict[Name, ArgValue] = Field(default_factory=dict, max_length=MAX_ARGS)


class AgentSpec(_Model):
    tools: list[str] = Field(description="the tool allowlist (least privilege)")
    system: str = "You are a helpful operations assistant. Use tools when they help."
    # Used when the LLM proposes no usable plan: a deterministic, reviewed plan.
    playbook: list[Step] = Field(default_factory=list, max_length=MAX_STEPS)


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
    policies: dict[str, CheckedPolicy]

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

"""The agent's resilience policy (``policies.<name>`` in ``stack/agent.yaml``), one model.

The agent runs it and ``faultday lint`` / ``faultday preflight`` judge it, so both
read it with these classes: a value one side refuses the other refuses too, with
the same message. Every number is bounded here, so arithmetic on a policy (the
lint's worst cases) cannot overflow.

What the runtime refuses across fields (timeouts that do not nest, a backoff that
starts above its cap) is :func:`contradictions`, a list, not a validator: the
agent refuses a policy that has any, the lint reports each one at its field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from faultday_wire.durations import Duration, shown

MAX_ATTEMPTS = 20


def _not_a_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True
    # isnan() only on a float: an int past a float's range would raise OverflowError.
    return isinstance(value, float) and math.isnan(value)


def bounded(*, whole: bool, low: float, high: float) -> BeforeValidator:
    """A YAML number within [low, high]; a string, a yes/no or nan is refused by name."""
    expected = f"expected {'a whole number' if whole else 'a number'} from {low:g} to {high:g}"

    def check(value: Any) -> Any:
        if _not_a_number(value):
            wrong = "is not a number"
        elif value < low:
            wrong = "is too small"
        elif value > high:
            wrong = "is too large"
        elif whole and isinstance(value, float) and not value.is_integer():
            wrong = "is not a whole number"
        else:
            return int(value) if whole else value
        # ValueError, not TypeError: pydantic turns only ValueError into a validation error.
        raise ValueError(f"{shown(value)} {wrong}; {expected}")

    return BeforeValidator(check)


class StrictModel(BaseModel):
    """What both sides read from a YAML file: unknown keys refused, frozen, finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Timeouts(StrictModel):
    model_call: Duration = Field(description="one LLM call (one attempt)")
    tool_call: Duration = Field(description="one tool call (one attempt)")
    task: Duration = Field(description="a whole agent task, every step included")
    request: Duration = Field(description="a whole chat request at the gateway")
    redis: Duration = Field(description="one Redis command")
    embed: Duration = Field(description="one embedder call")
    vector: Duration = Field(description="one vector search")
    wait: Duration = Field(description="cap on any wait for another task's result")


class Retries(StrictModel):
    attempts: Annotated[int, bounded(whole=True, low=1, high=MAX_ATTEMPTS)] = Field(
        description="attempts in all, the first included"
    )
    backoff_initial: Duration
    backoff_max: Duration
    jitter: Duration
    budget_ratio: Annotated[float, bounded(whole=False, low=0, high=10)] | None = Field(
        description="retries allowed per request (token bucket); null = no budget"
    )
    budget_min_per_s: Annotated[float, bounded(whole=False, low=0, high=1000)] = 1.0


class Breakers(StrictModel):
    enabled: bool
    threshold: Annotated[int, bounded(whole=True, low=1, high=1000)] = Field(
        default=5, description="consecutive failures that open it"
    )
    reset_after: Duration = Field(default=5.0, description="open → half-open after this")


class Admission(StrictModel):
    max_in_flight: Annotated[int, bounded(whole=True, low=1, high=100_000)]
    max_queue: Annotated[int, bounded(whole=True, low=0, high=100_000)]
    queue_timeout: Duration
    retry_after: Duration


class Policy(StrictModel):
    """One resilience policy; the agent also requires ``contradictions(policy) == []``."""

    timeouts: Timeouts
    retries: Retries
    breakers: Breakers
    fallback: bool = Field(description="run the fallback chains; false = fail on first loss")
    admission: Admission


@dataclass(frozen=True, slots=True)
class Contradiction:
    """Two fields of one policy that cannot both hold; ``path`` is the field to change."""

    path: tuple[str, ...]
    message: str
    fix: str


def contradictions(policy: Policy) -> list[Contradiction]:
    """Every cross-field rule the runtime refuses a policy for, each at its field."""
    t, r = policy.timeouts, policy.retries
    out: list[Contradiction] = []
    for inner, outer in (("model_call", "tool_call"), ("tool_call", "task")):
        a, b = getattr(t, inner), getattr(t, outer)
        if a >= b:
            out.append(
                Contradiction(
                    ("timeouts", inner),
                    f"{inner} timeout ({a:g}s) ≥ its {outer} timeout ({b:g}s): timeouts must"
                    " nest, model_call < tool_call < task",
                    f"make timeouts.{inner} well below timeouts.{outer} (e.g. {b / 4:g}s)",
                )
            )
    if t.request < t.model_call:
        out.append(
            Contradiction(
                ("timeouts", "request"),
                f"request timeout ({t.request:g}s) < model_call ({t.model_call:g}s):"
                " no model call fits in a request",
                f"make timeouts.request at least timeouts.model_call ({t.model_call:g}s)",
            )
        )
    elif policy.fallback and t.request < 2 * t.model_call:
        out.append(
            Contradiction(
                ("timeouts", "request"),
                f"request timeout ({t.request:g}s) leaves no room for the backup model:"
                f" with fallback it must be at least 2 x model_call ({2 * t.model_call:g}s)",
                f"timeouts.request ≥ {2 * t.model_call:g}s, or a shorter timeouts.model_call",
            )
        )
    if t.wait > t.task:
        out.append(
            Contradiction(
                ("timeouts", "wait"),
                f"wait ({t.wait:g}s) > task ({t.task:g}s): a task would wait past its own end",
                f"make timeouts.wait at most timeouts.task ({t.task:g}s)",
            )
        )
    if r.backoff_initial > r.backoff_max:
        out.append(
            Contradiction(
                ("retries", "backoff_initial"),
                f"backoff_initial ({r.backoff_initial:g}s) > backoff_max ({r.backoff_max:g}s)",
                "make retries.backoff_initial at most retries.backoff_max",
            )
        )
    return out

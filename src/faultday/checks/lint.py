"""``faultday lint``: contradictions in an agent policy file that make real game days fail.

Each policy is read with the agent's own model (``faultday_wire.policy``), so a
value the agent would refuse is refused here, with ``file:line:col`` and what
would be valid (a ``ScenarioError``: exit 2), never skipped. A policy that
parses is then judged: what the agent refuses across fields
(``contradictions``), what it would run but fail under an outage (errors), and
what makes an outage worse (warnings), each with a fix.

What the agent does with a request's time: it passes the remaining budget down
as a deadline (every attempt is capped by it and no retry starts past it), so
retries can never make a request outlast ``timeouts.request``. What they can do
is spend the whole budget on a step before the model call that answers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import ValidationError

from faultday.core.durations import format_duration
from faultday.core.yamlpos import (
    Document,
    PathKey,
    by_position,
    dotted,
    parse_file,
    validation_problems,
)
from faultday.errors import ScenarioError
from faultday_wire.policy import Policy, Retries, contradictions
from faultday_wire.problems import Problem


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Finding:
    file: str
    line: int
    col: int
    path: str
    severity: Severity
    message: str
    fix: str

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line}:{self.col}: {self.severity}: {self.path}: {self.message}"
            f"\n    fix: {self.fix}"
        )


# Which timeout bounds one attempt at each dependency, and which budget holds it.
DEPENDENCIES = {
    "llm": ("model_call", "request"),
    "tools": ("tool_call", "task"),
    "redis": ("redis", "request"),
    "embedder": ("embed", "request"),
    "vector": ("vector", "request"),
}
# The calls made before the model call that answers: the chat's history read (redis) and
# retrieval (embedder, vector), a task's tool calls. The model call itself may use what is
# left of the budget (the agent keeps a model call's worth for the backup model).
BEFORE_THE_ANSWER = ("tools", "redis", "embedder", "vector")


@dataclass(frozen=True, slots=True)
class AgentPolicies:
    """An agent policy file's policies, each parsed by the agent's own model."""

    doc: Document
    policies: dict[str, Policy]


def read_policies(path: Path) -> AgentPolicies:
    """Every policy in ``path``; a ``ScenarioError`` with every value that does not parse."""
    doc = parse_file(path)
    data = doc.data if isinstance(doc.data, dict) else {}
    raw = data.get("policies")
    if not isinstance(raw, dict) or not raw:
        got = "no policies" if raw is None else "policies is not a mapping of name to policy"
        where = ("policies",) if "policies" in data else ()
        raise ScenarioError(
            [doc.problem(where, f"{got}; expected policies.default with timeouts, retries,"
                         " breakers, fallback and admission")]
        )  # fmt: skip
    problems: list[Problem] = []
    policies: dict[str, Policy] = {}
    for name, value in raw.items():
        base: PathKey = ("policies", str(name))
        try:
            policies[str(name)] = Policy.model_validate(value)
        except ValidationError as exc:
            problems += validation_problems(doc, exc, prefix=base, model=Policy)
    if problems:
        raise ScenarioError(by_position(problems))
    return AgentPolicies(doc, policies)


def waits(r: Retries, attempts: int) -> float:
    """The longest the retries of ``attempts`` attempts wait between them (jitter included)."""
    # attempts ≤ MAX_ATTEMPTS and durations ≤ a day (the model's bounds): no overflow.
    return sum(
        min(r.backoff_max, r.backoff_initial * 2.0**i) + r.jitter for i in range(attempts - 1)
    )


class _Linter:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.findings: list[Finding] = []

    def add(self, path: PathKey, severity: Severity, message: str, fix: str) -> None:
        pos = self.doc.pos(path)
        self.findings.append(
            Finding(self.doc.file, pos.line, pos.col, dotted(path), severity, message, fix)
        )

    def policy(self, name: str, pol: Policy) -> None:
        base: PathKey = ("policies", name)
        for c in contradictions(pol):
            self.add(
                (*base, *c.path), Severity.ERROR, f"the agent refuses this: {c.message}", c.fix
            )
        self._before_the_answer(base, pol)
        self._retries(base, pol.retries)
        self._breakers_fallback(base, pol)

    def _before_the_answer(self, base: PathKey, pol: Policy) -> None:
        t, r = pol.timeouts, pol.retries
        answer = t.model_call
        for dep in BEFORE_THE_ANSWER:
            per_attempt, budget = DEPENDENCIES[dep]
            a, b = getattr(t, per_attempt), getattr(t, budget)
            worst = r.attempts * a + waits(r, r.attempts)
            if worst + answer <= b:
                continue
            fits = [n for n in range(1, r.attempts) if n * a + waits(r, n) + answer <= b]
            fewer = f"fewer attempts (≤ {fits[-1]}), " if fits else ""
            self.add(
                (*base, "retries", "attempts"),
                Severity.ERROR,
                f"{dep}: {r.attempts} attempts x {format_duration(a)} ({per_attempt})"
                f" + {format_duration(round(waits(r, r.attempts), 3))} backoff"
                f" = {format_duration(round(worst, 3))}; with one model call"
                f" ({format_duration(answer)}) that is beyond the {budget} budget"
                f" ({format_duration(b)}): when {dep} hangs, its retries run until the"
                f" deadline and the {budget} has no time left for the model call that answers",
                f"{fewer}a shorter timeouts.{per_attempt}, or a longer timeouts.{budget}",
            )

    def _retries(self, base: PathKey, r: Retries) -> None:
        if r.attempts <= 1:
            return
        if r.backoff_initial == 0:
            self.add(
                (*base, "retries", "backoff_initial"),
                Severity.WARNING,
                f"{r.attempts} attempts with no backoff: retries hit a failing dependency at once",
                "set backoff_initial (e.g. 50ms) and backoff_max (e.g. 1s), exponential",
            )
        if r.jitter == 0:
            self.add(
                (*base, "retries", "jitter"),
                Severity.WARNING,
                "retries without jitter: every client retries in lockstep (a retry storm)",
                "set jitter to about the initial backoff (e.g. 50ms)",
            )
        if r.budget_ratio is None:
            self.add(
                (*base, "retries", "budget_ratio"),
                Severity.WARNING,
                "no retry budget: under an outage retries multiply the load on the dependency",
                "set budget_ratio (e.g. 0.2 retries per request)",
            )

    def _breakers_fallback(self, base: PathKey, pol: Policy) -> None:
        if not pol.breakers.enabled:
            deps = ", ".join(DEPENDENCIES)
            self.add(
                (*base, "breakers", "enabled"),
                Severity.WARNING,
                f"no circuit breaker on any dependency ({deps}): a dead dependency is "
                "called (and waited for) on every request",
                "breakers: {enabled: true, threshold: 5, reset_after: 5s}",
            )
        if not pol.fallback:
            self.add(
                (*base, "fallback"),
                Severity.WARNING,
                "no fallback: losing the primary LLM, retrieval or history fails the request",
                "fallback: true (backup model, answer without context, canned answer)",
            )


def lint_policies(read: AgentPolicies) -> list[Finding]:
    """Every finding in policies already read, in the file's order."""
    linter = _Linter(read.doc)
    for name, pol in read.policies.items():
        linter.policy(name, pol)
    return sorted(linter.findings, key=lambda f: (f.line, f.col))


def lint_file(path: Path) -> list[Finding]:
    """Every finding in an agent policy file (stack/agent.yaml); ``ScenarioError`` (exit 2)
    when the file or a value in a policy does not parse."""
    return lint_policies(read_policies(path))

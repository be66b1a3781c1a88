"""``faultday lint``: contradictions in an agent policy file that make real game days fail.

The file is read as plain YAML with positions (not through the runtime's own
model, which refuses some of these outright), so every finding names its
``file:line:col`` and a fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from faultday.core.durations import format_duration, parse_duration
from faultday.core.yamlpos import Document, PathKey, dotted, parse_file


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


def _secs(value: object) -> float | None:
    if not isinstance(value, str):
        return None  # not a duration string (parse_duration would say so)
    try:
        return parse_duration(value)
    except ValueError:
        return None


class _Linter:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.findings: list[Finding] = []

    def add(self, path: PathKey, severity: Severity, message: str, fix: str) -> None:
        pos = self.doc.pos(path)
        self.findings.append(
            Finding(self.doc.file, pos.line, pos.col, dotted(path), severity, message, fix)
        )

    def policy(self, name: str, pol: dict[str, object]) -> None:
        base: PathKey = ("policies", name)
        t = {k: _secs(v) for k, v in dict(pol.get("timeouts") or {}).items()}  # type: ignore[call-overload]
        r = dict(pol.get("retries") or {})  # type: ignore[call-overload]
        self._nesting(base, t)
        self._retries(base, t, r)
        self._breakers_fallback(base, pol)

    def _nesting(self, base: PathKey, t: dict[str, float | None]) -> None:
        for inner, outer in (
            ("tool_call", "task"),
            ("model_call", "task"),
            ("model_call", "request"),
        ):
            a, b = t.get(inner), t.get(outer)
            if a is not None and b is not None and a >= b:
                self.add(
                    (*base, "timeouts", inner),
                    Severity.ERROR,
                    f"{inner} timeout ({format_duration(a)}) ≥ its {outer} timeout "
                    f"({format_duration(b)}): the {outer} times out before one {inner} can",
                    f"make timeouts.{inner} well below timeouts.{outer} "
                    f"(e.g. {format_duration(max(b / 4, 0.001))})",
                )

    def _retries(self, base: PathKey, t: dict[str, float | None], r: dict[str, object]) -> None:
        attempts = r.get("attempts")
        if not isinstance(attempts, int) or attempts <= 1:
            return
        initial = _secs(r.get("backoff_initial", "0s")) or 0.0
        cap = _secs(r.get("backoff_max", "0s")) or 0.0
        jitter = _secs(r.get("jitter", "0s")) or 0.0

        def waits_for(n: int) -> float:
            return float(sum(min(cap, initial * 2**i) for i in range(n - 1)))

        waits = waits_for(attempts)
        for dep, (per_attempt, budget) in DEPENDENCIES.items():
            a, b = t.get(per_attempt), t.get(budget)
            if a is None or b is None:
                continue
            worst = attempts * a + waits
            if worst > b:
                fits = max((n for n in range(1, attempts) if n * a + waits_for(n) <= b), default=1)
                self.add(
                    (*base, "retries", "attempts"),
                    Severity.ERROR,
                    f"{dep}: {attempts} attempts x {format_duration(a)} ({per_attempt})"
                    f" + {format_duration(round(waits, 3))} backoff"
                    f" = {format_duration(round(worst, 3))},"
                    f" beyond the {budget} budget ({format_duration(b)})",
                    f"fewer attempts (≤ {fits}), a shorter timeouts.{per_attempt},"
                    f" or pass the remaining budget down as a deadline",
                )
        if initial == 0:
            self.add(
                (*base, "retries", "backoff_initial"),
                Severity.WARNING,
                f"{attempts} attempts with no backoff: retries hit a failing dependency at once",
                "set backoff_initial (e.g. 50ms) and backoff_max (e.g. 1s), exponential",
            )
        if jitter == 0:
            self.add(
                (*base, "retries", "jitter"),
                Severity.WARNING,
                "retries without jitter: every client retries in lockstep (a retry storm)",
                "set jitter to about the initial backoff (e.g. 50ms)",
            )
        if r.get("budget_ratio") is None:
            self.add(
                (*base, "retries", "budget_ratio"),
                Severity.WARNING,
                "no retry budget: under an outage retries multiply the load on the dependency",
                "set budget_ratio (e.g. 0.2 retries per request)",
            )

    def _breakers_fallback(self, base: PathKey, pol: dict[str, object]) -> None:
        breakers = pol.get("breakers")
        if isinstance(breakers, dict) and breakers.get("enabled") is False:
            deps = ", ".join(DEPENDENCIES)
            self.add(
                (*base, "breakers", "enabled"),
                Severity.WARNING,
                f"no circuit breaker on any dependency ({deps}): a dead dependency is "
                "called (and waited for) on every request",
                "breakers: {enabled: true, threshold: 5, reset_after: 5s}",
            )
        if pol.get("fallback") is False:
            self.add(
                (*base, "fallback"),
                Severity.WARNING,
                "no fallback: losing the primary LLM, retrieval or history fails the request",
                "fallback: true (backup model, answer without context, canned answer)",
            )


def lint_file(path: Path) -> list[Finding]:
    """Every finding in an agent policy file (stack/agent.yaml); ScenarioError if unparsable."""
    doc = parse_file(path)
    linter = _Linter(doc)
    data = doc.data if isinstance(doc.data, dict) else {}
    policies = data.get("policies")
    if not isinstance(policies, dict) or not policies:
        linter.add(
            ("policies",),
            Severity.ERROR,
            "no policies in this file",
            "add policies.default with timeouts, retries, breakers, fallback",
        )
        return linter.findings
    for name, pol in policies.items():
        if isinstance(pol, dict):
            linter.policy(str(name), pol)
    return sorted(linter.findings, key=lambda f: (f.line, f.col))

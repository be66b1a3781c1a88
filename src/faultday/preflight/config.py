"""Configuration: ``faultday lint`` of the agent policy the stack runs, and the timeout
hierarchy across components (client timeout > agent request budget > model/tool timeouts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faultday.checks.lint import Severity, lint_file
from faultday.core.durations import format_duration, parse_duration
from faultday.core.journal import JournalCheck
from faultday.core.yamlpos import Document, PathKey, dotted, parse_file
from faultday.errors import ScenarioError
from faultday.preflight.base import Area, Subject, check

AGENT_TYPE = "agent"
CONFIG_FLAG = "--config"
# inner timeout → the budgets it must fit in; a chat request holds model, embedder, vector and
# Redis calls; a task holds model and tool calls. The rule: the request budget also
# bounds one tool call, so a tool can never hold a request past its deadline.
HIERARCHY: tuple[tuple[str, str], ...] = (
    ("model_call", "request"),
    ("tool_call", "request"),
    ("embed", "request"),
    ("vector", "request"),
    ("redis", "request"),
    ("model_call", "task"),
    ("tool_call", "task"),
)


@dataclass(frozen=True, slots=True)
class AgentPolicy:
    """The agent's policy file, as the stack's agent reads it, and the policy selected."""

    component: str
    file: Path
    policy: str


def agent_policies(subject: Subject) -> list[AgentPolicy]:
    """Every agent component's ``--config`` file (``{profile_dir}`` filled in)."""
    out = []
    profile_dir = (
        str(Path(subject.profile.source).resolve().parent)
        if subject.profile.source
        else str(subject.base_dir)
    )
    for comp in subject.components(AGENT_TYPE):
        argv = subject.profile.argv_template(comp.name)
        for i, arg in enumerate(argv[:-1]):
            if arg == CONFIG_FLAG:
                path = argv[i + 1].replace("{profile_dir}", profile_dir)
                out.append(AgentPolicy(comp.name, Path(path), subject.info.policy))
    return out


def agent_max_tokens(subject: Subject) -> int | None:
    """The largest ``max_tokens`` an agent asks its models for (models, canary)."""
    found: list[int] = []
    for ap in agent_policies(subject):
        try:
            doc = parse_file(ap.file)
        except ScenarioError:
            continue
        for path in (("models", "max_tokens"), ("models", "canary", "max_tokens")):
            value = doc.at(path)
            if isinstance(value, int):
                found.append(value)
    return max(found, default=None)


def check_config(subject: Subject) -> list[JournalCheck]:
    out: list[JournalCheck] = []
    policies = agent_policies(subject)
    if not policies:
        out.append(
            check(
                Area.CONFIG,
                "policy",
                "agent policy",
                ok=None,
                message="no agent component with a --config file in this stack",
            )
        )
    for ap in policies:
        out.extend(_one(subject, ap))
    return out


def _one(subject: Subject, ap: AgentPolicy) -> list[JournalCheck]:
    label = f"{ap.component}: policy {ap.policy!r} in {ap.file.name}"
    try:
        doc = parse_file(ap.file)
        findings = [
            f
            for f in lint_file(ap.file)
            if f.path == "policies" or f.path.startswith(f"policies.{ap.policy}.")
        ]
    except ScenarioError as exc:
        return [check(Area.CONFIG, "lint", label, ok=False, message=str(exc))]
    accepted = {a.path: a.why for a in subject.spec.lint_accept}
    errors = [f for f in findings if f.severity == Severity.ERROR and f.path not in accepted]
    taken = [f for f in findings if f.severity == Severity.ERROR and f.path in accepted]
    warnings = [f for f in findings if f.severity == Severity.WARNING]
    lint = check(
        Area.CONFIG,
        "lint",
        f"{label}: faultday lint",
        ok=not errors,
        expected="no lint errors",
        observed=f"{len(errors)} errors, {len(warnings)} warnings"
        + (f", {len(taken)} accepted" if taken else ""),
        where="; ".join(f"{f.file}:{f.line}:{f.col} {f.path}: {f.message}" for f in errors),
        message="; ".join(f"accepted {f.path}: {accepted[f.path]}" for f in taken),
    )
    return [lint, _hierarchy(subject, ap, doc, label)]


def _secs(doc: Document, path: PathKey) -> float | None:
    value = doc.at(path)
    if not isinstance(value, str):
        return None
    try:
        return parse_duration(value)
    except ValueError:
        return None


def _hierarchy(subject: Subject, ap: AgentPolicy, doc: Document, label: str) -> JournalCheck:
    base: PathKey = ("policies", ap.policy, "timeouts")
    if doc.at(base) is None:
        return check(
            Area.CONFIG,
            "timeouts",
            f"{label}: timeout hierarchy",
            ok=False,
            where=f"{ap.file}:1:1 {dotted(base)}",
            message=f"no policy {ap.policy!r} with timeouts in this file",
        )
    t = {k: _secs(doc, (*base, k)) for k in ("request", "task", *{i for i, _ in HIERARCHY})}
    problems: list[str] = []
    client = subject.spec.client_timeout
    request = t.get("request")
    if request is not None and request >= client:
        problems.append(
            _where(doc, (*base, "request"))
            + f": the request budget ({format_duration(request)}) ≥ the client's timeout"
            f" ({format_duration(client)}): the client gives up before the agent answers"
        )
    for inner, outer in HIERARCHY:
        a, b = t.get(inner), t.get(outer)
        if a is not None and b is not None and a >= b:
            problems.append(
                _where(doc, (*base, inner))
                + f": {inner} ({format_duration(a)}) ≥ the {outer} budget ({format_duration(b)})"
                f": one {inner} outlives the {outer} that waits for it"
            )
    return check(
        Area.CONFIG,
        "timeouts",
        f"{label}: timeout hierarchy",
        ok=not problems,
        expected="client > request > model_call, tool_call, embed, vector, redis; task > calls",
        observed=f"client {format_duration(client)}, request "
        + (format_duration(request) if request is not None else "?"),
        where="; ".join(problems),
    )


def _where(doc: Document, path: PathKey) -> str:
    pos = doc.pos(path)
    return f"{doc.file}:{pos.line}:{pos.col} {dotted(path)}"

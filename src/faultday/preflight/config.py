"""Configuration: ``faultday lint`` of the agent policy the stack runs, and the timeout
hierarchy across components (client timeout > agent request budget > model/tool timeouts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from faultday.checks.lint import AgentPolicies, Severity, lint_policies, read_policies
from faultday.core.durations import format_duration
from faultday.core.journal import JournalCheck
from faultday.core.profile import StackProfile
from faultday.core.yamlpos import (
    Document,
    PathKey,
    by_position,
    dotted,
    parse_file,
    validation_problems,
)
from faultday.errors import ScenarioError
from faultday.preflight.base import Area, Subject, check
from faultday_wire.llm import Models
from faultday_wire.policy import contradictions
from faultday_wire.problems import Problem

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


def agent_config_files(profile: StackProfile, base_dir: Path) -> list[tuple[str, Path]]:
    """(component, file) of every agent component's ``--config`` (``{profile_dir}`` filled in)."""
    profile_dir = str(Path(profile.source).resolve().parent) if profile.source else str(base_dir)
    out = []
    for name, comp in profile.spec.components.items():
        if comp.type != AGENT_TYPE:
            continue
        argv = profile.argv_template(name)
        for i, arg in enumerate(argv[:-1]):
            if arg == CONFIG_FLAG:
                out.append((name, Path(argv[i + 1].replace("{profile_dir}", profile_dir))))
    return out


def agent_policies(subject: Subject) -> list[AgentPolicy]:
    """Every agent component's ``--config`` file and the policy the stack runs."""
    running = {c.name for c in subject.components(AGENT_TYPE)}
    return [
        AgentPolicy(name, path, subject.info.policy)
        for name, path in agent_config_files(subject.profile, subject.base_dir)
        if name in running
    ]


def validate_agent_policies(profile: StackProfile, base_dir: Path) -> None:
    """Read every agent config file of ``profile`` as the agent does (its policies and its
    models, with the agent's own models), before any stack starts: a value that does not
    parse, or a policy the agent refuses, is a ``ScenarioError`` (exit 2) with every
    problem's ``file:line:col``."""
    problems: list[Problem] = []
    for _, path in agent_config_files(profile, base_dir):
        try:
            problems += _models(parse_file(path))[1]
            read = read_policies(path)
        except ScenarioError as exc:
            problems += exc.problems
            continue
        problems += [
            read.doc.problem(("policies", name, *c.path), f"the agent refuses this: {c.message}")
            for name, pol in read.policies.items()
            for c in contradictions(pol)
        ]
    if problems:
        raise ScenarioError(by_position(problems))


def _models(doc: Document) -> tuple[Models | None, list[Problem]]:
    """The file's ``models:`` as the agent reads it, or the problems with it."""
    try:
        return Models.model_validate(doc.at(("models",))), []
    except ValidationError as exc:
        return None, validation_problems(doc, exc, prefix=("models",), model=Models)


def agent_max_tokens(subject: Subject) -> int | None:
    """The largest ``max_tokens`` an agent asks its models for (models, canary)."""
    found: list[int] = []
    for ap in agent_policies(subject):
        try:
            models = _models(parse_file(ap.file))[0]
        except ScenarioError:
            continue  # the configuration check says why
        if models is not None:
            found.append(models.max_tokens)
            if models.canary is not None and models.canary.max_tokens is not None:
                found.append(models.canary.max_tokens)
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
        read = read_policies(ap.file)
    except ScenarioError as exc:
        return [check(Area.CONFIG, "lint", label, ok=False, message=str(exc))]
    findings = [f for f in lint_policies(read) if f.path.startswith(f"policies.{ap.policy}.")]
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
    return [lint, _hierarchy(subject, ap, read, label)]


def _hierarchy(subject: Subject, ap: AgentPolicy, read: AgentPolicies, label: str) -> JournalCheck:
    base: PathKey = ("policies", ap.policy, "timeouts")
    policy = read.policies.get(ap.policy)
    if policy is None:
        return check(
            Area.CONFIG,
            "timeouts",
            f"{label}: timeout hierarchy",
            ok=False,
            where=f"{ap.file}:1:1 {dotted(base)}",
            message=f"no policy {ap.policy!r} in this file; it has {', '.join(read.policies)}",
        )
    t = policy.timeouts
    problems: list[str] = []
    client = subject.spec.client_timeout
    if t.request >= client:
        problems.append(
            _where(read.doc, (*base, "request"))
            + f": the request budget ({format_duration(t.request)}) ≥ the client's timeout"
            f" ({format_duration(client)}): the client gives up before the agent answers"
        )
    for inner, outer in HIERARCHY:
        a, b = getattr(t, inner), getattr(t, outer)
        if a >= b:
            problems.append(
                _where(read.doc, (*base, inner))
                + f": {inner} ({format_duration(a)}) ≥ the {outer} budget ({format_duration(b)})"
                f": one {inner} outlives the {outer} that waits for it"
            )
    return check(
        Area.CONFIG,
        "timeouts",
        f"{label}: timeout hierarchy",
        ok=not problems,
        expected="client > request > model_call, tool_call, embed, vector, redis; task > calls",
        observed=f"client {format_duration(client)}, request {format_duration(t.request)}",
        where="; ".join(problems),
    )


def _where(doc: Document, path: PathKey) -> str:
    pos = doc.pos(path)
    return f"{doc.file}:{pos.line}:{pos.col} {dotted(path)}"

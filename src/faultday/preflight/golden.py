"""Interface: golden requests per component, each with an expected answer and a latency budget."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jsonschema

from faultday.core.components import ProbeKind
from faultday.core.durations import format_duration
from faultday.core.journal import JournalCheck
from faultday.core.preflight import (
    Expect,
    GoldenDefaults,
    GoldenRequest,
    LogRule,
    Protocol,
    load_golden_defaults,
)
from faultday.core.profile import ProbeSpec
from faultday.core.stackinfo import ComponentInfo
from faultday.preflight.base import Area, Subject, check
from faultday.stack.supervisor import probe_once

DEFAULTS_FILE = "golden.yaml"
_TEMPLATE = re.compile(r"\{(model|setting:[A-Za-z0-9_.-]+)\}")
_MAX_BODY = 1024 * 1024  # an answer read for judging; a golden answer is small


def defaults() -> GoldenDefaults:
    """The built-in golden requests and benign log lines (``preflight/golden.yaml``)."""
    return load_golden_defaults(Path(str(files("faultday.preflight") / DEFAULTS_FILE)))


def default_log_rules() -> tuple[LogRule, ...]:
    return defaults().log_ignore


@dataclass(frozen=True, slots=True)
class Planned:
    component: ComponentInfo
    request: GoldenRequest


def plan(subject: Subject) -> list[Planned]:
    """Every golden request for this stack: defaults per type, then the spec's own."""
    spec = subject.spec
    out: dict[tuple[str, str], Planned] = {}
    if spec.defaults:
        for req in defaults().golden:
            for comp in subject.components(req.type or ""):
                out[(comp.name, req.name)] = Planned(comp, req)
    by_name = {c.name: c for c in subject.info.components}
    for req in spec.golden:
        targets = (
            [by_name[req.component]]
            if req.component in by_name
            else subject.components(req.type or "")
            if req.component is None
            else []
        )
        for comp in targets:
            out[(comp.name, req.name)] = Planned(comp, req)
    return [p for p in out.values() if p.request.name not in spec.skip]


def unknown_components(subject: Subject) -> list[str]:
    names = {c.name for c in subject.info.components}
    return [
        f"golden {r.name!r}: no component {r.component!r} in the stack"
        for r in subject.spec.golden
        if r.component is not None and r.component not in names
    ] + [
        f"golden {r.name!r}: give a component or a type"
        for r in subject.spec.golden
        if r.component is None and r.type is None
    ]


def run_golden(subject: Subject, planned: list[Planned]) -> list[JournalCheck]:
    models: dict[str, str] = {}
    with httpx.Client(trust_env=False) as http:
        return [_one(subject, http, p, models) for p in planned]


def _one(subject: Subject, http: httpx.Client, p: Planned, models: dict[str, str]) -> JournalCheck:
    req, comp = p.request, p.component
    label = f"{comp.name}: {req.name}" + (" (stream)" if req.stream else "")
    budget = f"≤ {format_duration(req.budget)}"
    try:
        fill = _Filler(subject, http, comp, models)
        if req.protocol == Protocol.REDIS:
            took, pong = _redis(comp, req)
            problem = "" if pong else "no PONG to PING"
        else:
            took, answer = _http(http, comp, req, fill)
            problem = _judge(req.expect, answer, fill)
    except (httpx.HTTPError, OSError, ValueError, LookupError) as exc:
        return check(
            Area.INTERFACE,
            "golden",
            label,
            ok=False,
            expected=f"an answer {budget}",
            observed=type(exc).__name__,
            where=_where(comp, req),
            message=str(exc)[:300],
        )
    slow = took > req.budget
    if slow and not problem:
        problem = f"took {format_duration(round(took, 3))}, over its budget"
    return check(
        Area.INTERFACE,
        "golden",
        label,
        ok=not problem,
        expected=f"{_describe(req)}, {budget}",
        observed=f"{format_duration(round(took, 3))}" + (f", {problem}" if problem else ""),
        where=_where(comp, req),
    )


class _Filler:
    """Fills a golden request's templates for one component."""

    def __init__(
        self, subject: Subject, http: httpx.Client, comp: ComponentInfo, models: dict[str, str]
    ) -> None:
        self.subject, self.http, self.comp, self.models = subject, http, comp, models

    def text(self, text: str) -> str:
        return _TEMPLATE.sub(lambda m: self._value(m.group(1)), text)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def _value(self, key: str) -> str:
        if key == "model":
            return self._model()
        name = key.split(":", 1)[1]
        settings = self.subject.settings(self.comp.name)
        if name not in settings:
            raise ValueError(f"{{{key}}}: component {self.comp.name} has no setting {name!r}")
        return str(settings[name])

    def _model(self) -> str:
        if self.comp.name not in self.models:
            r = self.http.get(f"{self.comp.url}/v1/models", timeout=5.0)
            r.raise_for_status()
            self.models[self.comp.name] = str(r.json()["data"][0]["id"])
        return self.models[self.comp.name]


def _redis(comp: ComponentInfo, req: GoldenRequest) -> tuple[float, bool]:
    url = urlsplit(comp.url)
    t0 = time.perf_counter()
    ok = probe_once(
        ProbeSpec(kind=ProbeKind.REDIS),
        host=url.hostname or "127.0.0.1",
        port=url.port or 6379,
        timeout=req.timeout,
    )
    return time.perf_counter() - t0, ok


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: Any  # parsed JSON, or the streamed text
    text: str


def _http(
    http: httpx.Client, comp: ComponentInfo, req: GoldenRequest, fill: _Filler
) -> tuple[float, Answer]:
    url = comp.url + fill.text(req.path)
    body = fill.value(req.body) if req.body is not None else None
    t0 = time.perf_counter()
    if req.stream:
        with http.stream(req.method, url, json=body, timeout=req.timeout) as r:
            text, done = _read_sse(r)
            took = time.perf_counter() - t0
        if r.status_code < 300 and not done:
            raise ValueError("the stream ended without data: [DONE]")
        return took, Answer(r.status_code, text, text)
    r = http.request(req.method, url, json=body, timeout=req.timeout)
    took = time.perf_counter() - t0
    raw = r.text[:_MAX_BODY]
    try:
        parsed: Any = json.loads(raw)
    except ValueError:
        parsed = raw
    return took, Answer(r.status_code, parsed, raw)


def _read_sse(r: httpx.Response) -> tuple[str, bool]:
    """The text an OpenAI-style SSE stream carries, and whether it ended with [DONE]."""
    parts: list[str] = []
    for line in r.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return "".join(parts), True
        try:
            chunk = json.loads(data)
        except ValueError:
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            parts.append(str(delta.get("content") or choice.get("text") or ""))
    return "".join(parts), False


def _pick(body: Any, path: str) -> Any:
    current = body
    for part in [p for p in path.split(".") if p]:
        if isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        elif isinstance(current, dict) and part in current:
            current = current[part]
        else:
            raise LookupError(f"no {path!r} in the answer")
    return current


def _judge(expect: Expect, answer: Answer, fill: _Filler) -> str:
    """'' when the answer holds every expectation, else what is wrong."""
    if answer.status != expect.status:
        return f"status {answer.status} (expected {expect.status}): {answer.text[:200]}"
    try:
        value = _pick(answer.body, expect.json_path)
    except LookupError as exc:
        return f"{exc}: {answer.text[:200]}"
    return _judge_value(expect, value, fill)


def _judge_value(expect: Expect, value: Any, fill: _Filler) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    at = expect.json_path or "answer"
    problems = []
    if expect.equals is not None and value != fill.value(expect.equals):
        problems.append(f"{at} is {text[:100]}, not {json.dumps(expect.equals)}")
    for want in (fill.text(w) for w in expect.contains):
        found = want in [str(v) for v in value] if isinstance(value, list) else want in text
        if not found:
            problems.append(f"{at} lacks {want!r}: {text[:200]}")
    if expect.regex is not None and not re.search(fill.text(expect.regex), text):
        problems.append(f"{at} does not match /{expect.regex}/: {text[:200]}")
    if expect.json_schema is not None:
        problems.append(_schema(expect.json_schema, value))
    if expect.embedding_dim is not None:
        problems.append(_dim(fill.value(expect.embedding_dim), value))
    return "; ".join(p for p in problems if p)


def _schema(schema: dict[str, Any], value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            return f"not JSON: {value[:100]!r} ({exc})"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return f"does not match its JSON Schema: {exc.message}"
    return ""


def _dim(want: Any, value: Any) -> str:
    vec = value[0] if isinstance(value, list) and value and isinstance(value[0], list) else value
    if not isinstance(vec, list):
        return f"not a vector: {str(value)[:100]}"
    if len(vec) != int(want):
        return f"a vector of {len(vec)} numbers, not {want}"
    return ""


def _where(comp: ComponentInfo, req: GoldenRequest) -> str:
    if req.protocol == Protocol.REDIS:
        return f"PING {comp.url}"
    return f"{req.method} {comp.url}{req.path}"


def _describe(req: GoldenRequest) -> str:
    if req.protocol == Protocol.REDIS:
        return "PONG"
    expect = req.expect
    what = [f"{expect.status}"]
    at = expect.json_path or "answer"
    if expect.equals is not None:
        what.append(f"{at} = {json.dumps(expect.equals)}")
    if expect.contains:
        what.append(f"{at} ∋ {', '.join(expect.contains)}")
    if expect.regex is not None:
        what.append(f"{at} ~ /{expect.regex}/")
    if expect.json_schema is not None:
        what.append(f"{at} fits its JSON Schema")
    if expect.embedding_dim is not None:
        what.append(f"{at}: {expect.embedding_dim}-d vector")
    return "; ".join(what)

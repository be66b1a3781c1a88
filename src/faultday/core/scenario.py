"""Scenario model v1 (docs/scenarios.md). Frozen, strict: unknown keys are errors."""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from faultday.core.types import (
    AS_DURATION,
    Bool,
    Duration,
    Int,
    Number,
    at_most,
    at_most_schema,
    duration_at_least,
    whole,
)

API_VERSION = "faultday/v1"
# (?!\n): Python's "$" also matches before a final newline, ECMA's (editors) does not.
NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?!\n)$"

# Bounds that keep a run (and its validation) finite; docs/scenarios.md lists them.
MAX_FAULTS = 50
MAX_CHECKS = 50  # in each of steady_state, expect and abort
MAX_TAGS = 64
MAX_TEXT = 10_000  # a description
MAX_LINE = 1_000  # a title, a tag, a name that is not a slug, a reference
MAX_PATH = 4_096  # a stack profile path (PATH_MAX)
MAX_USERS = 10_000
MIN_SAMPLE_INTERVAL = "250ms"
MAX_RUN = "168h"  # a week: a longer soak is a deployment, not a run the harness holds open
DEFAULT_SPANS = 200_000  # spans a run keeps (traces.max_spans)
MAX_SPANS = 5_000_000  # at some 500 bytes a span kept, a few GB of traces.db at most
MAX_FORWARD = 8  # a user's own OTLP/HTTP collectors a run forwards spans to
MAX_URL = 2_048

Line = Annotated[str, StringConstraints(max_length=MAX_LINE)]
RunDuration = Annotated[float, at_most(MAX_RUN), AS_DURATION, at_most_schema(MAX_RUN)]
"""A run's length: a Duration of at most MAX_RUN."""

# Keys of a check item that place it in time; every other key is the check's own
# parameter, validated against that check's Params model by the loader.
CHECK_RESERVED_KEYS = frozenset({"check", "during", "after", "anytime", "for", "name"})


class Strict(BaseModel):
    # No NaN or infinity: YAML writes them (.nan, .inf) and so does a number too
    # large for a float; either would make a run's arithmetic meaningless.
    # Patterns run on Python's re, as in the jsonschema package: one dialect, one verdict.
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        allow_inf_nan=False,
        regex_engine="python-re",
    )


class Severity(StrEnum):
    SEV1 = "SEV1"
    SEV2 = "SEV2"
    SEV3 = "SEV3"
    SEV4 = "SEV4"


class NaiveExpectation(Strict):
    """What this scenario catches when the stack runs the ``naive`` resilience policy."""

    fails: tuple[Line, ...] = Field(
        min_length=1, max_length=MAX_CHECKS, description="checks that must fail under naive"
    )
    because: str = Field(
        min_length=1, max_length=MAX_TEXT, description="the stated reason, shown in reports"
    )


class Metadata(Strict):
    name: str = Field(pattern=NAME_PATTERN, max_length=63, description="lower-case slug, unique")
    title: str = Field(default="", max_length=MAX_LINE)
    description: str = Field(default="", max_length=MAX_TEXT)
    tags: tuple[Line, ...] = Field(default=(), max_length=MAX_TAGS)
    runbook: str | None = Field(
        default=None, max_length=MAX_LINE, description="runbooks/<name>.md.j2"
    )
    severity: Severity = Severity.SEV3
    naive: NaiveExpectation | None = Field(
        default=None, description="set when the naive policy must make this scenario fail"
    )


class LoadShape(StrEnum):
    CONSTANT = "constant"
    RAMP = "ramp"
    STEP = "step"
    SPIKE = "spike"
    SOAK = "soak"  # constant users, plus RSS and open-FD sampling per component (docs/soak.md)


class Workload(StrEnum):
    CHAT = "chat"
    RAG = "rag"
    AGENT = "agent"
    MIXED = "mixed"
    HTTP = "http"  # any path of any component: see target, path, method, body, stream
    NONE = "none"


class HttpMethod(StrEnum):
    GET = "GET"
    POST = "POST"


class AnswerSpec(Strict):
    """Which answers the load quotes and the report shows (docs/load.md, "Answer quality")."""

    cap: whole(ge=0, le=1000) = Field(  # type: ignore[valid-type]
        default=20,
        description="answers quoted per window and load process: every one up to it, then a "
        "reservoir sample",
    )
    bytes: whole(ge=1, le=4096) = Field(  # type: ignore[valid-type]
        default=200, description="the first bytes of each quoted answer"
    )
    rows: whole(ge=0, le=100) = Field(  # type: ignore[valid-type]
        default=5, description="sampled answers the report shows per window"
    )
    canned: tuple[Line, ...] = Field(
        default=(), max_length=20, description="fallback texts besides the reference agent's"
    )


class LoadSpec(Strict):
    workload: Workload = Field(default=Workload.CHAT, description="what the simulated users do")
    target: str = Field(
        default="agent", max_length=MAX_LINE, description="the component the load is sent to"
    )
    path: str = Field(
        default="/health", max_length=MAX_PATH, description="http workload: the path requested"
    )
    method: HttpMethod = Field(default=HttpMethod.GET, description="http workload: the method")
    body: JsonValue = Field(default=None, description="http workload: a JSON body to POST")
    stream: Bool = Field(default=False, description="http workload: read the answer as SSE")
    think_time: Duration = Field(default=0.0, description="pause between a user's requests")
    users: Int = Field(default=8, ge=0, le=MAX_USERS)
    spawn_rate: Number = Field(
        default=8.0, gt=0, le=MAX_USERS, description="users started a second"
    )
    shape: LoadShape = LoadShape.CONSTANT
    workers: Int = Field(default=0, ge=0, le=64, description="Locust worker processes; 0 = local")
    step_users: whole(ge=1, le=MAX_USERS) | None = Field(  # type: ignore[valid-type]
        default=None, description="users added per step (step)"
    )
    step_every: Duration | None = Field(default=None, description="time between steps (step)")
    spike_users: whole(ge=1, le=MAX_USERS) | None = Field(  # type: ignore[valid-type]
        default=None, description="peak users (spike)"
    )
    spike_at: Duration | None = None
    spike_duration: Duration | None = None
    max_requests: whole(ge=1) | None = Field(  # type: ignore[valid-type]
        default=None, description="hard cap on requests sent"
    )
    sample_interval: duration_at_least(MIN_SAMPLE_INTERVAL) = Field(  # type: ignore[valid-type]
        default=1.0, description=f"time-series resolution, >= {MIN_SAMPLE_INTERVAL}"
    )
    answers: AnswerSpec = Field(
        default_factory=AnswerSpec, description="answer quality: which answers are quoted"
    )


# An OTLP/HTTP collector's URL: http or https, a host (a DNS name, an IPv4 address or an
# IPv6 one in brackets), a port 1-65535, a path and query of printable ASCII, no user:password@
# and no #fragment. Written as one pattern so that the loader and the JSON Schema (what an
# editor checks) give one verdict; the HTTP client that sends to it does the real parsing.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
URL_PATTERN = (
    rf"^https?://(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::{_PORT})?"
    r'(?:/[!"$-~]*)?(?!\n)$'
)
_URL = re.compile(URL_PATTERN)
URL_EXAMPLE = "http://collector.example:4318/v1/traces"


def _collector_url(url: str) -> str:
    """An http(s) URL a run may POST spans to; ValueError saying what is wrong and what is valid."""
    if _URL.search(url) is None:
        raise ValueError(
            f"{_not_a_url(url)}; expected http(s)://host[:port][/path], e.g. {URL_EXAMPLE}"
        )
    if "[" in url:  # an IPv6 literal: the pattern only saw hex digits, colons and dots
        literal = url.split("[", 1)[1].split("]", 1)[0]
        try:
            ipaddress.IPv6Address(literal)
            urlsplit(url)  # the parser the URL's users share agrees
        except ValueError:
            raise ValueError(f"[{literal}] is not an IPv6 address; e.g. {URL_EXAMPLE}") from None
    return url


def _not_a_url(url: str) -> str:
    """What is wrong with a URL the pattern refused: the first rule it breaks."""
    scheme, sep, rest = url.partition("://")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    port = re.search(r":([^:\]]*)$", authority)
    rules = (
        (not sep, f"{url[:80]!r} is not a URL"),
        (
            scheme not in ("http", "https"),
            f"{scheme[:20]!r} URLs are not supported: spans go over OTLP/HTTP, http or https",
        ),
        (
            any(not "!" <= c <= "~" for c in url),
            "a URL holds no spaces, control or non-ASCII characters (percent-encode them)",
        ),
        (
            "@" in authority,
            "no user:password@ in the URL: the scenario, and the run's journal, would show it",
        ),
        ("#" in url, "no #fragment in the URL"),
        (not authority, "the URL names no host"),
        (
            port is not None and re.fullmatch(_PORT, port.group(1)) is None,
            f"the port in {authority[:80]!r} is not a number from 1 to 65535",
        ),
    )
    return next(
        (why for broken, why in rules if broken),
        f"{authority[:80]!r} is not a host name, an IPv4 address or an [IPv6] address",
    )


def _a_list(value: object) -> object:
    if isinstance(value, str):
        raise ValueError(f"a list of URLs, even for one: forward: [{value[:80]}]")  # noqa: TRY004
    return value


def _distinct(urls: tuple[str, ...]) -> tuple[str, ...]:
    seen = {u for i, u in enumerate(urls) if u in urls[:i]}
    if seen:
        raise ValueError(f"each collector once: {', '.join(sorted(seen))[:200]} is given twice")
    return urls


_URL_SCHEMA: dict[str, JsonValue] = {
    "type": "string",
    "pattern": URL_PATTERN,
    "maxLength": MAX_URL,
    "description": f"an OTLP/HTTP collector, http or https, e.g. {URL_EXAMPLE}",
}
CollectorUrl = Annotated[
    str,
    Field(max_length=MAX_URL),
    AfterValidator(_collector_url),
    WithJsonSchema(_URL_SCHEMA),
]
"""A user's own OTLP/HTTP collector: an http(s) URL without credentials or fragment."""


class TracesSpec(Strict):
    """Distributed traces of the run (docs/scenarios.md, "Traces"): the load starts a W3C
    trace per request; the harness collects the stack's spans and may forward them."""

    enabled: Bool = Field(
        default=True, description="false: no traceparent on requests, no spans collected"
    )
    sample: Number = Field(
        default=1.0,
        ge=0,
        le=1,
        description="share of requests whose trace is sampled (flag 01); the rest carry 00",
    )
    max_spans: Int = Field(
        default=DEFAULT_SPANS,
        ge=1,
        le=MAX_SPANS,
        description="the most spans one run keeps",
    )
    forward: Annotated[
        tuple[CollectorUrl, ...],
        BeforeValidator(_a_list),
        AfterValidator(_distinct),
        WithJsonSchema(
            {
                "type": "array",
                "items": _URL_SCHEMA,
                "maxItems": MAX_FORWARD,
                "uniqueItems": True,
            }
        ),
    ] = Field(
        default=(),
        max_length=MAX_FORWARD,
        description="your own OTLP/HTTP collectors: every span kept is sent to each as well",
    )


class CheckSpec(Strict):
    """One assertion. ``params`` holds the check's own keys, validated per check."""

    check: Line
    name: Line | None = None
    during: Line | None = Field(default=None, description="a fault name: its window")
    after: Line | None = Field(default=None, description="a fault name: from its end to run end")
    anytime: Bool = Field(default=False, description="the whole run")
    for_: Duration | None = Field(default=None, alias="for", description="abort: sustained for")
    params: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _gather_params(cls, data: object) -> object:
        if not isinstance(data, dict) or "params" in data:
            return data
        core = {k: v for k, v in data.items() if k in CHECK_RESERVED_KEYS}
        core["params"] = {k: v for k, v in data.items() if k not in CHECK_RESERVED_KEYS}
        return core

    @model_validator(mode="after")
    def _one_window(self) -> CheckSpec:
        chosen = [k for k, v in (("during", self.during), ("after", self.after)) if v]
        if self.anytime:
            chosen.append("anytime")
        if len(chosen) > 1:
            raise ValueError(
                f"give at most one of during/after/anytime, not {' and '.join(chosen)}"
            )
        return self

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        where = (
            f"during {self.during}" if self.during else f"after {self.after}" if self.after else ""
        )
        return f"{where}: {self.check}" if where else self.check


class Fault(Strict):
    name: str = Field(pattern=NAME_PATTERN, max_length=63)
    inject: Line = Field(description="injector short name, e.g. latency, gpu_loss, process_pause")
    target: Line = Field(description="a component (llm-primary) or an edge (agent->qdrant)")
    at: Duration = Field(description="start, from the end of warm-up")
    duration: Duration | None = Field(default=None, description="omit for one-shot faults")
    with_: dict[str, JsonValue] = Field(default_factory=dict, alias="with")

    @property
    def end(self) -> float:
        return self.at + (self.duration or 0.0)


class ScenarioSpec(Strict):
    stack: str = Field(
        default="local",
        min_length=1,
        max_length=MAX_PATH,
        description="stack/<name>.yaml, or a path",
    )
    policy: Line | None = Field(default=None, description="agent resilience profile, e.g. naive")
    duration: RunDuration = Field(description=f"the run from t=0, at most {MAX_RUN}")
    warmup: Duration = Field(default=5.0, description="load before t=0; not checked")
    recovery: Duration = Field(
        default=10.0, description="time after the last fault before steady state is checked again"
    )
    load: LoadSpec = Field(default_factory=LoadSpec)
    steady_state: tuple[CheckSpec, ...] = Field(default=(), max_length=MAX_CHECKS)
    faults: tuple[Fault, ...] = Field(default=(), max_length=MAX_FAULTS)
    expect: tuple[CheckSpec, ...] = Field(default=(), max_length=MAX_CHECKS)
    abort: tuple[CheckSpec, ...] = Field(default=(), max_length=MAX_CHECKS)
    traces: TracesSpec = Field(
        default_factory=TracesSpec, description="distributed traces: sampling, cap, forwarding"
    )


class Scenario(Strict):
    api_version: Literal["faultday/v1"] = Field(alias="apiVersion")
    kind: Literal["Scenario"]
    metadata: Metadata
    spec: ScenarioSpec

    @property
    def name(self) -> str:
        return self.metadata.name

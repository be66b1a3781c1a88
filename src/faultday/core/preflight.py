"""What ``faultday preflight`` checks before a game day: golden requests, limits, log rules.

The built-in golden requests per component type are data (``faultday/preflight/golden.yaml``,
the same model); a stack profile's ``spec.preflight`` or a preflight file
(``kind: Preflight``, ``faultday preflight --config``) adds to them or replaces them,
validated like a scenario: every problem at once with ``file:line:col`` and the field.

Strings in a golden request (path, body, expectations) are templates:
``{model}`` (the first model the component's ``/v1/models`` lists) and
``{setting:KEY}`` (the component's ``settings`` in the profile).
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from jsonschema import SchemaError
from jsonschema.validators import validator_for
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from faultday.core.types import Duration
from faultday.core.yamlpos import by_position, parse_file, validation_problems
from faultday.errors import ScenarioError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _compiles(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
    return value


Regex = Annotated[str, AfterValidator(_compiles)]

_SCHEMA_EXAMPLE = "{type: object, required: [query]}"
_JSON_TYPES = "array, boolean, integer, null, number, object, string"
_KINDS = {
    list: "a list",
    str: "a string",
    bool: "true or false",
    int: "a number",
    float: "a number",
}


def _json_schema(value: object) -> object:
    """A JSON Schema object that its own draft's metaschema accepts, or what is wrong."""
    if value is None:
        return value
    if not isinstance(value, dict):
        what = _KINDS.get(type(value), type(value).__name__)
        if isinstance(value, str) and _holds_object(value):
            what = "a string holding JSON (write the object itself, without the quotes)"
        why = f"a JSON Schema is a mapping of keywords such as {_SCHEMA_EXAMPLE}, not {what}"
        raise PydanticCustomError("json_schema", "{why}", {"why": why})
    try:
        validator_for(value).check_schema(value)
    except SchemaError as exc:
        where = list(exc.absolute_path)
        at = ".".join(map(str, where)) + ": " if where else ""
        hint = f" (a type is one of {_JSON_TYPES})" if where and where[-1] == "type" else ""
        why = f"not a valid JSON Schema: {at}{exc.message}{hint}"
        raise PydanticCustomError("json_schema", "{why}", {"why": why}) from exc
    return value


def _holds_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


JsonSchema = Annotated[dict[str, JsonValue] | None, BeforeValidator(_json_schema)]


class Protocol(StrEnum):
    HTTP = "http"
    REDIS = "redis"  # a PING that must answer PONG (no HTTP interface to speak of)


class Expect(_Strict):
    """What a golden answer must hold. ``json_path`` picks the part the others judge."""

    status: int = Field(default=200, ge=100, le=599, description="the HTTP status")
    json_path: str = Field(
        default="",
        description="dotted path into the JSON answer (choices.0.message.content); "
        "'' = the whole answer (a stream: its text)",
    )
    equals: JsonValue = Field(default=None, description="the value at json_path equals this")
    contains: tuple[str, ...] = Field(
        default=(), description="each appears in the text (a list: is one of its items)"
    )
    regex: Regex | None = Field(default=None, description="re.search must find it in the text")
    json_schema: JsonSchema = Field(
        default=None,
        description="the value (a string holding JSON is parsed first: tool-call arguments) "
        "validates against this JSON Schema",
    )
    embedding_dim: int | str | None = Field(
        default=None, description="the value is a vector of this many numbers ({setting:dim})"
    )


class GoldenRequest(_Strict):
    """One request with a known good answer and a latency budget."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    type: str | None = Field(
        default=None, description="golden.yaml: the component type it applies to"
    )
    component: str | None = Field(
        default=None, description="a profile's component (default: every one of `type`)"
    )
    protocol: Protocol = Protocol.HTTP
    method: Literal["GET", "POST"] = "GET"
    path: str = "/"
    body: JsonValue = None
    stream: bool = Field(default=False, description="read the answer as SSE (OpenAI chunks)")
    budget: Duration = Field(default=2.0, description="latency budget (stream: to the end)")
    timeout: Duration = Field(default=10.0, description="give up after this long")
    expect: Expect = Expect()


class LogRule(_Strict):
    """A log line that is not a finding, and why (a known-benign message)."""

    pattern: Regex = Field(description="regular expression, searched in the line")
    why: str = Field(min_length=1, description="why this line is harmless")
    component: str | None = Field(default=None, description="only in this component's log")


class LintAccept(_Strict):
    """A ``faultday lint`` error of the agent policy accepted, and why."""

    path: str = Field(description="the finding's field (policies.default.retries.attempts)")
    why: str = Field(min_length=1, description="why it does not hold for this stack")


class PreflightSpec(_Strict):
    """Preflight settings: where one is not given, the defaults below hold."""

    defaults: bool = Field(default=True, description="run golden.yaml's requests per type")
    golden: tuple[GoldenRequest, ...] = Field(
        default=(),
        max_length=200,
        description="more golden requests; one named like a default replaces it",
    )
    skip: tuple[str, ...] = Field(default=(), description="golden requests to leave out (name)")
    concurrency: int = Field(default=8, ge=1, le=256, description="the target concurrency")
    max_kv_cache_usage: float = Field(
        default=0.8, gt=0, le=1, description="vllm:kv_cache_usage_perc at that concurrency"
    )
    max_prompt_tokens: int = Field(
        default=2048, ge=1, description="the longest prompt the workload sends"
    )
    max_tokens: int | None = Field(
        default=None, ge=1, description="what the workload asks for (None: the agent policy's)"
    )
    client_timeout: Duration = Field(
        default=30.0, description="the client's request timeout (the load's: 30s)"
    )
    max_gpu_memory_used: float = Field(
        default=0.95, gt=0, le=1, description="DCGM framebuffer used / total"
    )
    max_gpu_util: float = Field(default=100.0, gt=0, le=100, description="DCGM GPU_UTIL, %")
    max_gpu_bandwidth_util: float = Field(
        default=100.0, gt=0, le=100, description="DCGM MEM_COPY_UTIL (memory bandwidth), %"
    )
    max_rss_mib: int = Field(default=4096, ge=1, description="per component (its process tree)")
    max_fd_share: float = Field(
        default=0.5, gt=0, le=1, description="open descriptors / the process' soft limit"
    )
    log_repeats: int = Field(
        default=3, ge=2, description="a retry/timeout message this often is a finding"
    )
    log_ignore: tuple[LogRule, ...] = Field(
        default=(), max_length=200, description="more benign log lines"
    )
    lint_accept: tuple[LintAccept, ...] = Field(
        default=(), description="agent-policy lint errors accepted for this stack"
    )
    log_max_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="the tail of each log that is read"
    )


class PreflightFile(_Strict):
    """A preflight file: ``faultday preflight --config FILE``."""

    api_version: Literal["faultday/v1"] = Field(alias="apiVersion")
    kind: Literal["Preflight"]
    stack: str = Field(
        default="local",
        description="the stack profile it checks, by name or path from this file's folder "
        "(the pytest item; `faultday preflight --profile` names its own)",
    )
    spec: PreflightSpec = PreflightSpec()


class GoldenDefaults(_Strict):
    """``faultday/preflight/golden.yaml``: the built-in requests and benign log lines."""

    golden: tuple[GoldenRequest, ...]
    log_ignore: tuple[LogRule, ...] = ()


def load_preflight_file(path: Path) -> PreflightFile:
    """A preflight file; ScenarioError with file:line:col and the field."""
    doc = parse_file(path)
    try:
        return PreflightFile.model_validate(doc.data)
    except ValidationError as exc:
        raise ScenarioError(
            by_position(validation_problems(doc, exc, model=PreflightFile))
        ) from exc


def load_golden_defaults(path: Path) -> GoldenDefaults:
    doc = parse_file(path)
    try:
        return GoldenDefaults.model_validate(doc.data)
    except ValidationError as exc:
        raise ScenarioError(
            by_position(validation_problems(doc, exc, model=GoldenDefaults))
        ) from exc

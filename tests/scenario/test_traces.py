"""The scenario's ``traces:`` block: defaults, valid settings, and each mistake located at its
line and column with what would be valid; the JSON Schema gives the same verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tests.conftest import ROOT

from faultday.core.scenario import (
    DEFAULT_SPANS,
    MAX_FORWARD,
    MAX_SPANS,
    URL_PATTERN,
    TracesSpec,
)
from faultday.errors import ScenarioError
from faultday.scenario.loader import load_scenario

BASE = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: traced}
spec:
  duration: 60s
  load: {workload: chat, users: 2, spawn_rate: 2}
  traces:
    sample: 0.1
    max_spans: 50000
    forward:
      - http://otel-collector:4318/v1/traces
      - https://traces.example.com/v1/traces
"""
SCHEMA = json.loads((ROOT / "schema" / "scenario.schema.json").read_text())
# What only the loader can judge: NaN is no JSON, and whether hex digits and colons in
# brackets make an IPv6 address is more than the schema's pattern says.
LOADER_ONLY = {"a NaN share", "not an IPv6 address"}


def load(tmp_path: Path, text: str) -> TracesSpec:
    path = tmp_path / "traced.scenario.yaml"
    path.write_text(text)
    return load_scenario(path).scenario.spec.traces


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "traced.scenario.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    return [str(p).removeprefix(f"{path}:") for p in info.value.problems]


def test_the_block_is_read(tmp_path: Path) -> None:
    traces = load(tmp_path, BASE)
    assert traces == TracesSpec(
        enabled=True,
        sample=0.1,
        max_spans=50_000,
        forward=("http://otel-collector:4318/v1/traces", "https://traces.example.com/v1/traces"),
    )


def test_without_the_block_every_request_is_traced(tmp_path: Path) -> None:
    traces = load(tmp_path, BASE.split("  traces:", maxsplit=1)[0])
    assert traces == TracesSpec()
    assert (traces.enabled, traces.sample, traces.max_spans, traces.forward) == (
        True,
        1.0,
        DEFAULT_SPANS,
        (),
    )


@pytest.mark.parametrize(
    "text",
    [
        BASE.replace("sample: 0.1", "sample: 0"),
        BASE.replace("sample: 0.1", "sample: 1"),
        BASE.replace("max_spans: 50000", f"max_spans: {MAX_SPANS}"),
        BASE.replace("max_spans: 50000", "max_spans: 1"),
        BASE.replace("sample: 0.1", "enabled: false"),
        BASE.replace("otel-collector:4318", "[::1]:4318").replace("traces.example.com", "10.0.0.7"),
        BASE.replace("/v1/traces\n", "/v1/traces?tenant=a%20b\n", 1),
        BASE.replace("https://traces.example.com/v1/traces", "http://x"),
    ],
)
def test_valid_settings(tmp_path: Path, text: str) -> None:
    load(tmp_path, text)
    assert not list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(yaml.safe_load(text)))


# (what replaces what, where the error points (line:col), words the message must hold)
MISTAKES: dict[str, tuple[tuple[str, str], str, str]] = {
    "a share above 1": (("sample: 0.1", "sample: 1.5"), "8:13", "less than or equal to 1"),
    "a negative share": (("sample: 0.1", "sample: -0.1"), "8:13", "greater than or equal to 0"),
    "a share as text": (("sample: 0.1", 'sample: "0.1"'), "8:13", "valid number"),
    "a NaN share": (("sample: 0.1", "sample: .nan"), "8:13", ".nan is not a number"),
    "no spans at all": (("max_spans: 50000", "max_spans: 0"), "9:16", "greater than or equal to 1"),
    "too many spans": (
        ("max_spans: 50000", "max_spans: 10000000"),
        "9:16",
        f"less than or equal to {MAX_SPANS}",
    ),
    "a fraction of a span": (("max_spans: 50000", "max_spans: 2.5"), "9:16", "integer"),
    "enabled as text": (("sample: 0.1", 'enabled: "true"'), "8:14", "valid boolean"),
    "a misspelt key": (("sample: 0.1", "sampel: 0.1"), "8:5", "did you mean 'sample'"),
    "an ftp collector": (
        ("http://otel-collector:4318", "ftp://otel-collector"),
        "11:9",
        "'ftp' URLs are not supported",
    ),
    "credentials in the URL": (
        ("http://otel-collector", "http://me:secret@otel-collector"),
        "11:9",
        "no user:password@",
    ),
    "a port past 65535": (
        ("otel-collector:4318", "otel-collector:65536"),
        "11:9",
        "not a number from 1 to 65535",
    ),
    "a space in the URL": (("/v1/traces\n", "/v1/ traces\n"), "11:9", "no spaces"),
    "a fragment": (("/v1/traces\n", "/v1/traces#x\n"), "11:9", "no #fragment"),
    "no scheme": (("http://otel-collector", "otel-collector"), "11:9", "is not a URL"),
    "not an IPv6 address": (("otel-collector", "[:::1::]"), "11:9", "not an IPv6 address"),
    "a host with an underscore": (
        ("otel-collector", "otel_collector"),
        "11:9",
        "not a host name",
    ),
    "one URL, not a list": (
        (
            "forward:\n      - http://otel-collector:4318/v1/traces\n"
            "      - https://traces.example.com/v1/traces\n",
            "forward: http://otel-collector:4318/v1/traces\n",
        ),
        "10:14",
        "a list of URLs, even for one",
    ),
    "the same collector twice": (
        ("https://traces.example.com", "http://otel-collector:4318"),
        "11:7",
        "given twice",
    ),
    "too many collectors": (
        (
            "      - https://traces.example.com/v1/traces\n",
            "".join(f"      - http://c{i}:4318/v1/traces\n" for i in range(MAX_FORWARD)),
        ),
        "11:7",
        f"at most {MAX_FORWARD} items",
    ),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_is_located_and_says_what_is_valid(tmp_path: Path, name: str) -> None:
    (old, new), where, words = MISTAKES[name]
    assert old in BASE
    text = BASE.replace(old, new, 1)
    found = problems(tmp_path, text)
    assert any(p.startswith(f"{where}: spec.traces") and words in p for p in found), found
    # The JSON Schema (what an editor checks) refuses it too.
    doc: Any = yaml.safe_load(text)
    refused = bool(list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc)))
    assert refused == (name not in LOADER_ONLY), name


def test_the_url_messages_name_an_example(tmp_path: Path) -> None:
    found = problems(tmp_path, BASE.replace("http://otel-collector", "ftp://otel-collector"))
    assert any("e.g. http://collector.example:4318/v1/traces" in p for p in found), found


def test_every_problem_of_the_block_at_once(tmp_path: Path) -> None:
    text = (
        BASE.replace("sample: 0.1", "sample: 2")
        .replace("max_spans: 50000", "max_spans: -1")
        .replace("http://otel-collector", "gopher://otel-collector")
    )
    found = problems(tmp_path, text)
    assert [p.split(":")[0] for p in found] == ["8", "9", "11"], found


def test_the_schema_describes_the_block() -> None:
    traces = SCHEMA["$defs"]["TracesSpec"]
    assert traces["additionalProperties"] is False
    assert set(traces["properties"]) == {"enabled", "sample", "max_spans", "forward"}
    assert traces["properties"]["forward"]["maxItems"] == MAX_FORWARD
    assert SCHEMA["$defs"]["ScenarioSpec"]["properties"]["traces"]["$ref"].endswith("TracesSpec")


TRACES_SCHEMA = jsonschema.Draft202012Validator({**SCHEMA["$defs"]["TracesSpec"], "$defs": {}})
WELL_FORMED = st.from_regex(URL_PATTERN.replace(r"(?!\n)$", r"\Z"))
STRAY = st.sampled_from([*" \t\n#@:/?[]_%", "\u00e9", "٣", ":0", ":65536", "ftp", "HTTP"])


@st.composite
def near_misses(draw: st.DrawFn) -> str:
    """A well-formed URL with one character or piece put in, replaced or cut."""
    url = draw(WELL_FORMED)
    i = draw(st.integers(0, len(url)))
    return url[:i] + draw(STRAY | st.just("")) + url[i + draw(st.integers(0, 2)) :]


@settings(max_examples=300, deadline=None, database=None)
@given(url=WELL_FORMED | near_misses() | st.text(max_size=30))
@example(url="http://a:65535/")
@example(url="http://a:65536/")
@example(url="http://a\n")
@example(url="https://a.b-c.d/v1/traces?x=1&y=%20")
def test_the_schema_and_the_loader_agree_on_a_collector_url(url: str) -> None:
    assume("[" not in url)  # an IPv6 literal: the loader also asks ipaddress (LOADER_ONLY)
    by_schema = not list(TRACES_SCHEMA.iter_errors({"forward": [url]}))
    try:
        TracesSpec.model_validate({"forward": [url]})
        by_loader = True
    except ValidationError:
        by_loader = False
    assert by_schema == by_loader, url

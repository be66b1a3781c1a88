"""The JSON Schema and the loader agree: cases drawn from the schema get one verdict from both.

The schema (``schema/scenario.schema.json``, what an editor checks as you type)
is walked property by property; for each, values are drawn from what the
schema says about it (its pattern, length, bounds, enum, type) and from just
outside it (a digit that is not ASCII, one character too many, one past the
maximum, a string for a number, the key left out). Each draw replaces one
property of a valid scenario, and ``jsonschema`` and ``load_scenario`` must
both accept it or both reject it.

What only the loader can judge, and JSON Schema cannot say, is left out on
purpose and listed in ``LOADER_ONLY``: names that refer to other things (a
check, an injector, a fault, a stack's targets), a check's or an injector's own
parameters, and the time line (a fault's window inside the run, room to
recover). NaN and infinity are not JSON; the loader rejects them (tested in
``test_loader.py``).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import random
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from tests.conftest import ROOT

from faultday.core.durations import (
    MAX_CHARS,
    PATTERN,
    UNIT_SECONDS,
    exact_seconds,
    parse_duration,
    pattern_at_least,
    pattern_at_most,
)
from faultday.errors import ScenarioError
from faultday.scenario.loader import load_scenario

SCHEMA: dict[str, Any] = json.loads((ROOT / "schema" / "scenario.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,  # no .hypothesis/ folder left in the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

BASE: dict[str, Any] = {
    "apiVersion": "faultday/v1",
    "kind": "Scenario",
    "metadata": {
        "name": "agree",
        "title": "t",
        "tags": ["a"],
        "naive": {"fails": ["error_rate"], "because": "b"},
    },
    "spec": {
        "duration": "168h",  # the most a run may last: every fault fits
        "load": {"workload": "chat", "users": 2, "spawn_rate": 2, "sample_interval": "1s"},
        "steady_state": [{"check": "error_rate", "max": 0.5}],
        "faults": [
            {
                "name": "f",
                "inject": "http_error",
                "target": "agent->llm-primary",
                "at": "1s",
                "duration": "1s",
                "with": {"status": 503},
            }
        ],
        "expect": [{"check": "error_rate", "max": 0.5}],
        "abort": [{"check": "error_rate", "max": 0.9, "for": "10s"}],
    },
}

# Rules JSON Schema cannot state; the loader's messages for them are not a disagreement.
LOADER_ONLY = re.compile(
    r"the fault window ends at .* after the scenario's duration"
    r"|no time is left to check the steady state again"
)
# Properties whose value the schema leaves to the loader (see the module's docstring).
SKIPPED = {
    ("spec", "faults", 0, "inject"): "names an injector",
    ("spec", "faults", 0, "with"): "the injector's own parameters",
    ("spec", "steady_state", 0, "check"): "names a check",
    ("spec", "expect", 0, "check"): "names a check",
    ("spec", "abort", 0, "check"): "names a check",
    ("spec", "steady_state", 0, "during"): "names a fault",
    ("spec", "steady_state", 0, "after"): "names a fault",
    ("spec", "expect", 0, "during"): "names a fault",
    ("spec", "expect", 0, "after"): "names a fault",
    ("spec", "abort", 0, "during"): "abort conditions have no window",
    ("spec", "abort", 0, "after"): "abort conditions have no window",
    ("spec", "steady_state", 0, "for"): "'for' belongs to abort conditions",
    ("spec", "expect", 0, "for"): "'for' belongs to abort conditions",
}
DELETE = object()  # the key is left out

Path_ = tuple[str | int, ...]


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if not isinstance(ref, str):
        return node
    target: Any = SCHEMA
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return _resolve(target)


def _object_of(node: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema inside ``node`` (through $ref and a nullable anyOf), if any."""
    node = _resolve(node)
    if "properties" in node:
        return node
    for branch in node.get("anyOf", ()):
        found = _object_of(branch)
        if found is not None:
            return found
    return None


def _properties(
    node: dict[str, Any], data: Any, path: Path_ = ()
) -> list[tuple[Path_, dict[str, Any]]]:
    """Every property the schema describes, with its schema, where the base has its parent."""
    out: list[tuple[Path_, dict[str, Any]]] = []
    obj = _object_of(node)
    if obj is None or not isinstance(data, dict):
        return out
    for key, sub in obj["properties"].items():
        here = (*path, key)
        if here in SKIPPED:
            continue
        out.append((here, sub))
        value = data.get(key)
        resolved = _resolve(sub)
        if resolved.get("type") == "array" and isinstance(value, list) and value:
            items = resolved.get("items", {})
            out += _properties(items, value[0], (*here, 0))
        else:
            out += _properties(sub, value, here)
    return out


PROPERTIES = _properties(SCHEMA, BASE)


def test_the_walk_reaches_every_part_of_the_schema() -> None:
    paths = {".".join(map(str, p)) for p, _ in PROPERTIES}
    for wanted in (
        "apiVersion",
        "metadata.name",
        "metadata.naive.fails",
        "spec.duration",
        "spec.load.sample_interval",
        "spec.load.spawn_rate",
        "spec.faults.0.at",
        "spec.abort.0.for",
        "spec.faults",
    ):
        assert wanted in paths
    assert len(PROPERTIES) >= 45


# ------------------------------------------------------------------ values from the schema

DIGITS_ELSEWHERE = "٠١٢٣٤٥٦٧٨٩０１２３４５６７８９०१२३४५६७८९𝟎𝟏"
STRAY = [*"٣３५𝟏", ".", " ", "\t", "\n", "-", "+", "e", "x", "S", "_", "\u00a0"]
WRONG_TYPES: list[Any] = [None, True, 0, 2.5, "", "x", "5", [], [1], {}, {"a": 1}]
# Well-formed strings for the patterns the schema uses; those a pattern rejects are kept
# too, as values just outside it (249ms for a 250ms minimum).
SAMPLES = [
    "1s",
    "30s\n",
    " 1 \tms",
    "0.5h",
    "250ms",
    "249ms",
    "0.25s",
    "0.2499s",
    "250000us",
    "249999.9us",
    "0.0041667m",
    "0.0041666m",
    "0.0000694445h",
    "0.0000694444h",
    "1" * 31 + "h",
    "agree",
    "a",
    "a-b",
    "a-",
    "a" * 63,
    "a" * 64,
    "A",
]


def _edit(valid: str, i: int, how: str, char: str) -> str:
    if how == "insert" or not valid:
        return valid[:i] + char + valid[i:]
    i = min(i, len(valid) - 1)
    return valid[:i] + (char if how == "replace" else "") + valid[i + 1 :]


@st.composite
def _near_miss(draw: st.DrawFn, valid: st.SearchStrategy[str]) -> str:
    """A valid string broken by one edit: a foreign digit, a stray character, one cut."""
    text = draw(valid)
    return _edit(
        text,
        draw(st.integers(0, len(text))),
        draw(st.sampled_from(["insert", "replace", "delete"])),
        draw(st.sampled_from(STRAY)),
    )


def _string_edges(node: dict[str, Any], rng: random.Random) -> list[Any]:
    low, high = node.get("minLength", 0), node.get("maxLength")
    out: list[Any] = ["a" * n for n in {0, max(low - 1, 0), low, low + 1}]
    if high is not None:
        out += ["a" * n for n in (high - 1, high, high + 1)]
    pattern = node.get("pattern")
    if pattern is not None:
        valid = [s for s in SAMPLES if re.search(pattern, s)]
        near = [s for s in SAMPLES if not re.search(pattern, s)]
        out += valid + near[:6]
        for _ in range(12):  # one edit of a well-formed string, drawn with a fixed seed
            text = rng.choice(valid)
            how = rng.choice(["insert", "replace", "delete"])
            out.append(_edit(text, rng.randint(0, len(text)), how, rng.choice(STRAY)))
        if high is not None:  # long but well-formed: the digits run up to the length limit
            out += ["0" * (n - 2) + "1s" for n in (high - 1, high, high + 1)]
    return out


def _bound_edges(node: dict[str, Any], *, step: float) -> list[Any]:
    out: list[Any] = []
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in node:
            v = node[key]
            out += [v - step, v, v + step]
    return out


def _array_edges(node: dict[str, Any], path: Path_) -> list[Any]:
    low, high = node.get("minItems", 0), node.get("maxItems")
    sizes = sorted({0, 1, low, max(low - 1, 0), *([high, high + 1] if high else [])})
    base_item = _base_at((*path, 0))
    if isinstance(base_item, dict) and "inject" in base_item:
        # faults: copies of the base fault, each named apart (a repeated name is a loader rule)
        return [[{**base_item, "name": f"f{i}"} for i in range(n)] for n in sizes]
    if base_item is not None:
        return [[copy.deepcopy(base_item) for _ in range(n)] for n in sizes]
    item = _resolve(node.get("items", {}))
    long = "a" * (item.get("maxLength", 8) + 1)
    return [["a"] * n for n in sizes] + [[long], [1], [None], [["a"]]]


def edges(node: dict[str, Any], path: Path_) -> list[Any]:
    """Values on and just past each edge of what ``node`` allows, and of the wrong type."""
    node = _resolve(node)
    rng = random.Random(".".join(map(str, path)))
    out: list[Any] = [DELETE, *WRONG_TYPES]
    for branch in node.get("anyOf", ()):
        out += edges(branch, path)[1 + len(WRONG_TYPES) :]
    if "const" in node:
        out += [node["const"], str(node["const"]).upper(), f"{node['const']} "]
    if "enum" in node:
        out += node["enum"] + [str(e).lower() for e in node["enum"]]
    kind = node.get("type")
    if kind == "string":
        out += _string_edges(node, rng)
    elif kind == "integer":
        bounds = _bound_edges(node, step=1)
        out += [*bounds, *(float(b) for b in bounds), 5.0, 5.5, True, "5", 10**30, 10**400]
    elif kind == "number":
        out += [*_bound_edges(node, step=1), *_bound_edges(node, step=1e-9), 10**400, 1e300]
        out += [0, -1e-300, 1e-300, 0.5, "0.5", True]
    elif kind == "boolean":
        out += [True, False, "true", "yes", 1, 0]
    elif kind == "array":
        out += _array_edges(node, path)
    elif kind == "null":
        out.append(None)
    elif "properties" in node:
        base = _base_at(path)
        out += [copy.deepcopy(base) if base is not None else {}, {"unknown": 1}]
    return _unique(out)


def _unique(values: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for v in values:
        key = "DELETE" if v is DELETE else f"{type(v).__name__}:{v!r}"
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def values_for(node: dict[str, Any], path: Path_) -> st.SearchStrategy[Any]:
    """The edges, and values drawn at random in and around what ``node`` allows."""
    resolved = _resolve(node)
    parts: list[st.SearchStrategy[Any]] = [st.sampled_from(edges(node, path))]
    for branch in [resolved, *(_resolve(b) for b in resolved.get("anyOf", ()))]:
        kind = branch.get("type")
        if kind == "string":
            parts.append(st.text(max_size=12))
            if "pattern" in branch:
                high = branch.get("maxLength", 64)
                valid = st.from_regex(branch["pattern"]).filter(lambda s, h=high: len(s) <= h + 2)
                parts += [valid, _near_miss(valid)]
        elif kind == "integer":
            parts.append(st.integers())
        elif kind == "number":
            parts.append(st.floats(allow_nan=False, allow_infinity=False) | st.integers())
    return st.one_of(parts)


def _base_at(path: Path_) -> Any:
    node: Any = BASE
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _with(path: Path_, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    parent: Any = doc
    for part in path[:-1]:
        parent = parent[part]
    if value is DELETE:
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    return doc


# Built once: a strategy per property (from_regex compiles its pattern when first drawn).
VALUES = {path: st.one_of(st.just(DELETE), values_for(node, path)) for path, node in PROPERTIES}
CASES = st.sampled_from(sorted(VALUES, key=str)).flatmap(
    lambda path: st.tuples(st.just(path), VALUES[path])
)


# ------------------------------------------------------------------ the two verdicts


def _schema_verdict(doc: dict[str, Any]) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)
    ]


_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _loader_verdict(doc: dict[str, Any], path: Path) -> list[str] | None:
    """The loader's problems (LOADER_ONLY ones left out); None if YAML cannot carry ``doc``."""
    text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    if yaml.load(text, Loader=_Loader) != doc:  # a SafeLoader, C or Python
        return None
    path.write_text(text, encoding="utf-8")
    try:
        load_scenario(path)
    except ScenarioError as exc:
        return [str(p) for p in exc.problems if not LOADER_ONLY.search(p.message)]
    return []


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agree") / "case.scenario.yaml"


def test_the_base_scenario_is_valid_for_both(scratch: Path) -> None:
    assert _schema_verdict(BASE) == []
    assert _loader_verdict(BASE, scratch) == []


@SETTINGS
@given(case=CASES)
@example(case=(("spec", "load", "sample_interval"), "1us"))
@example(case=(("spec", "load", "sample_interval"), "250ms"))
@example(case=(("spec", "load", "sample_interval"), "249.9999ms"))
@example(case=(("spec", "load", "sample_interval"), "0.00417m"))
@example(case=(("spec", "duration"), "٣٠s"))
@example(case=(("spec", "duration"), "1" * 400 + "s"))
@example(case=(("spec", "duration"), "30s\n"))
@example(case=(("metadata", "name"), "agree\n"))
@example(case=(("spec", "load", "users"), "5"))
@example(case=(("spec", "load", "users"), 5.0))
@example(case=(("spec", "load", "spawn_rate"), 10**400))
@example(case=(("spec", "load", "stream"), "yes"))
@example(
    case=(("spec", "faults"), [{**BASE["spec"]["faults"][0], "name": f"f{i}"} for i in range(51)])
)
def test_schema_and_loader_give_the_same_verdict(case: tuple[Path_, Any], scratch: Path) -> None:
    path, value = case
    doc = _with(path, value)
    by_schema = _schema_verdict(doc)
    by_loader = _loader_verdict(doc, scratch)
    assume(by_loader is not None)  # a value YAML cannot carry as it is: not this test's
    where = ".".join(map(str, path))
    assert bool(by_schema) == bool(by_loader), (
        f"{where} = {value!r:.200}\n  schema: {by_schema}\n  loader: {by_loader}"
    )


@pytest.mark.parametrize(
    ("path", "node"), PROPERTIES, ids=[".".join(map(str, p)) for p, _ in PROPERTIES]
)
def test_every_edge_of_every_property_gets_one_verdict(
    path: Path_, node: dict[str, Any], scratch: Path
) -> None:
    disagree = []
    for value in edges(node, path):
        doc = _with(path, value)
        by_schema, by_loader = _schema_verdict(doc), _loader_verdict(doc, scratch)
        if by_loader is not None and bool(by_schema) != bool(by_loader):
            disagree.append(f"{value!r:.120}\n    schema: {by_schema}\n    loader: {by_loader}")
    assert not disagree, "\n  ".join(disagree)


# ------------------------------------------------------------------ durations, exactly

UNITS = st.sampled_from(["us", "ms", "s", "m", "h"])
NUMBERS = st.from_regex(r"\A[0-9]{1,12}(\.[0-9]{1,12})?\Z")


MINIMUMS = st.sampled_from([Fraction(1, 4), Fraction(1, 240), Fraction(7, 8), Fraction(0)]) | (
    st.fractions(0, 10_000, max_denominator=64)  # a short period: a regex of modest size
)


@st.composite
def _near(draw: st.DrawFn, minimum: Fraction, unit: str) -> str:
    """A decimal number a digit or so from ``minimum`` in ``unit``: where a regex slips."""
    t = minimum / UNIT_SECONDS[unit]
    k = draw(st.integers(0, 12))
    n = max(0, math.floor(t * 10**k) + draw(st.sampled_from([-1, 0, 0, 1])))
    digits = str(n).rjust(k + 1, "0")
    if not k:
        return digits
    tail = draw(st.sampled_from(["", "", "0", "9", "1", "00001", "99999"]))
    return f"{digits[:-k]}.{digits[-k:]}{tail}"


@SETTINGS
@given(data=st.data(), minimum=MINIMUMS, unit=UNITS)
def test_the_at_least_pattern_is_the_exact_comparison(
    data: st.DataObject, minimum: Fraction, unit: str
) -> None:
    number = data.draw(NUMBERS | _near(minimum, unit), label="number")
    text = number + unit
    assert bool(_at_least(minimum).search(text)) == (exact_seconds(text) >= minimum), text


MAXIMUMS = st.sampled_from([Fraction(3600), Fraction(168 * 3600), Fraction(99 * 3600)]) | (
    st.integers(1, 10**6).map(lambda hours: Fraction(hours * 3600))
)


@st.composite
def _near_most(draw: st.DrawFn, maximum: Fraction, unit: str) -> str:
    """A decimal number at or a digit from ``maximum`` in ``unit``."""
    n = int(maximum / UNIT_SECONDS[unit]) + draw(st.sampled_from([-1, 0, 0, 1]))
    zeros = "0" * draw(st.integers(0, 3))
    tail = draw(st.sampled_from(["", ".0", ".00", ".5", ".0001", ".9"]))
    return f"{zeros}{max(n, 0)}{tail}"


@SETTINGS
@given(data=st.data(), maximum=MAXIMUMS, unit=UNITS)
@example(data=None, maximum=Fraction(168 * 3600), unit="h")
def test_the_at_most_pattern_is_the_exact_comparison(
    data: st.DataObject | None, maximum: Fraction, unit: str
) -> None:
    numbers = ["168", "168.0", "0168.00", "168.0001", "167.9999", "169", "0", "0.5", "1000"]
    drawn = [data.draw(NUMBERS | _near_most(maximum, unit), label="n")] if data else numbers
    for number in drawn:
        text = number + unit
        by_pattern = bool(re.search(pattern_at_most(maximum), text))
        assert by_pattern == (exact_seconds(text) <= maximum), text


@functools.lru_cache(maxsize=256)
def _at_least(minimum: Fraction) -> re.Pattern[str]:
    return re.compile(pattern_at_least(minimum))


@SETTINGS
@given(text=st.text(alphabet=st.sampled_from([*"0123456789.smuh \t\n", *DIGITS_ELSEWHERE])))
@example(text="1" * (MAX_CHARS - 1) + "h")
@example(text="1" * MAX_CHARS + "h")
def test_the_duration_pattern_is_the_parser(text: str) -> None:
    by_pattern = bool(re.search(PATTERN, text)) and len(text) <= MAX_CHARS
    try:
        seconds = parse_duration(text)
    except ValueError:
        assert not by_pattern, text
    else:
        assert by_pattern, text
        assert 0 <= seconds < float("inf")

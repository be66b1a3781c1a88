"""Each file issue 15 found breaking ``faultday validate``, and each value that would break a run.

One case a row, from the issue's own list: what the file holds, where the error
must point (line:col), and words the message must contain. Every one is a
ScenarioError in well under a second; the generated corpus in
``test_mutations.py`` covers the same ground at random.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tests.conftest import ROOT

from faultday.core.yamlpos import MAX_FILE_BYTES, parse_text
from faultday.errors import ScenarioError
from faultday.scenario.loader import load_scenario
from faultday.session import target_resolver

FAULT = (
    "    - {name: f%s, inject: http_error, target: agent->llm-primary, at: 30s, "
    "duration: 50s, with: {status: 503}}\n"
)
BASE = """\
apiVersion: faultday/v1
kind: Scenario
metadata:
  name: limits
  tags: [a, b]
spec:
  stack: local
  duration: 180s
  load: {workload: chat, users: 8, spawn_rate: 8}
  steady_state:
    - {check: error_rate, max: 0.01}
  faults:
""" + (FAULT % "")
LAUGHS = "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
)

# name: (text, line:col, words in the message)
CASES: dict[str, tuple[str, str, str]] = {
    "recursive alias": (
        BASE.replace("tags: [a, b]", "tags: &t [a, *t]"),
        "5:9",
        "recursive alias",
    ),
    "5000-deep nesting": (
        BASE.replace("tags: [a, b]", "tags: " + "[" * 5000 + "]" * 5000),
        "5:",
        "nested deeper than 64 levels",
    ),
    "a NUL byte": (BASE.replace("name: limits", "name: li\x00mits"), "4:11", "U+0000"),
    "a BEL byte": (BASE.replace("name: limits", "name: li\x07mits"), "4:11", "U+0007"),
    "an unknown key with [": (
        BASE.replace("kind: Scenario", "kind: Scenario\nfoo[0: 1"),
        "3:1",
        "foo[0: unknown key",
    ),
    "a 1 MB stack value": (
        BASE.replace("stack: local", "stack: " + "a" * 1_000_000),
        "1:1",
        "larger than the limit of 256 KiB",
    ),
    "a 60 kB stack value": (
        BASE.replace("stack: local", "stack: " + "a" * 60_000),
        "7:10",
        "at most 4096 characters",
    ),
    "a 300-character profile name": (
        BASE.replace("stack: local", "stack: " + "a" * 300),
        "7:10",
        "File name too long",
    ),
    "stack: /dev/zero": (
        BASE.replace("stack: local", "stack: /dev/zero"),
        "7:10",
        "not a regular file",
    ),
    "stack: a folder": (BASE.replace("stack: local", "stack: /etc"), "7:10", "a folder"),
    "billion laughs": (
        BASE.replace("spec:", LAUGHS + "spec:"),
        "",
        "more than 2,500 values once aliases are expanded",
    ),
    "20 000 faults": (
        BASE + "".join(FAULT % i for i in range(20_000)),
        "1:1",
        "larger than the limit",
    ),
    "51 faults": (
        BASE + "".join(FAULT % i for i in range(50)),
        "13:5",
        "at most 50 items",
    ),
    "a 5000-digit number": (
        BASE.replace("max: 0.01", "max: " + "9" * 5000),
        "11:32",
        "cannot read this value",
    ),
    "2023-02-30": (BASE.replace("at: 30s", "at: 2023-02-30"), "13:69", "day is out of range"),
    "!!bool maybe": (BASE.replace("users: 8", "users: !!bool maybe"), "9:33", "not a valid bool"),
    "sample_interval: 1us": (
        BASE.replace("spawn_rate: 8}", "spawn_rate: 8, sample_interval: 1us}"),
        "9:68",
        "'1us' is too short: the minimum is 250ms",
    ),
    "sample_interval: 249.999ms": (
        BASE.replace("spawn_rate: 8}", "spawn_rate: 8, sample_interval: 249.999ms}"),
        "9:68",
        "the minimum is 250ms",
    ),
    "a 400-digit duration": (
        BASE.replace("duration: 180s", "duration: " + "1" * 400 + "s"),
        "8:13",
        "longer than 32 characters",
    ),
    "max: .nan": (BASE.replace("max: 0.01", "max: .nan"), "11:32", "finite number"),
    "max: .inf": (BASE.replace("max: 0.01", "max: .inf"), "11:32", "finite number"),
    "max: 1e400": (BASE.replace("max: 0.01", "max: 1e400"), "11:32", "finite number"),
    "error_rate max: 7": (
        BASE.replace("max: 0.01", "max: 7"),
        "11:32",
        "less than or equal to 1",
    ),
    "error_rate min: -0.1": (
        BASE.replace("max: 0.01", "min: -0.1"),
        "11:32",
        "greater than or equal to 0",
    ),
    "fallback_rate max: 1.5": (
        BASE.replace("check: error_rate, max: 0.01", "check: fallback_rate, max: 1.5"),
        "11:35",
        "less than or equal to 1",
    ),
    "Arabic-Indic digits": (
        BASE.replace("duration: 180s", "duration: ١٨٠s"),
        "8:13",
        "is not a duration",
    ),
    "full-width digits": (BASE.replace("at: 30s", "at: ３０s"), "13:69", "is not a duration"),
    "users: '8'": (BASE.replace("users: 8", "users: '8'"), "9:33", "expected a whole number"),
    "spawn_rate: 1e400": (
        BASE.replace("spawn_rate: 8", "spawn_rate: 1e400"),
        "9:48",
        "Input should be a valid number",
    ),
    "an empty stack": (BASE.replace("stack: local", "stack: ''"), "7:10", "at least 1 character"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_case_is_a_located_error_in_well_under_a_second(name: str, tmp_path: Path) -> None:
    text, where, words = CASES[name]
    path = tmp_path / "case.scenario.yaml"
    path.write_text(text, encoding="utf-8")
    resolver = target_resolver(ROOT)
    load_scenario(ROOT / "scenarios" / "retry-storm.scenario.yaml", resolve_targets=resolver)
    start = time.perf_counter()
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, resolve_targets=resolver)
    took = time.perf_counter() - start
    rendered = [str(p) for p in info.value.problems]
    assert any(r.startswith(f"{path}:{where}") and words in r for r in rendered), rendered
    assert took < 1.0, f"{took:.2f}s"


def test_the_base_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "base.scenario.yaml"
    path.write_text(BASE)
    load_scenario(path, resolve_targets=target_resolver(ROOT))


def test_boundaries_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "edge.scenario.yaml"
    text = BASE.replace("spawn_rate: 8}", "spawn_rate: 8, sample_interval: 250ms}")
    text = text.replace("max: 0.01", "max: 1").replace("duration: 180s", 'duration: "180s\\n"')
    path.write_text(text + "".join(FAULT % i for i in range(49)))
    load_scenario(path, resolve_targets=target_resolver(ROOT))


def test_special_files_are_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.scenario.yaml"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    with pytest.raises(ScenarioError, match="not a regular file"):
        load_scenario(fifo)
    with pytest.raises(ScenarioError, match="not a regular file: a device"):
        load_scenario(Path("/dev/zero"))
    with pytest.raises(ScenarioError, match="not a regular file: a folder"):
        load_scenario(tmp_path)
    big = tmp_path / "big.scenario.yaml"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(ScenarioError, match="larger than the limit of 256 KiB"):
        load_scenario(big)
    bad = tmp_path / "latin1.scenario.yaml"
    bad.write_bytes(b"apiVersion: faultday/v1\nkind: Sc\xe9nario\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(bad)
    assert str(info.value).startswith(f"{bad}:2:9: not UTF-8 text: byte 0xe9")


def test_a_key_with_a_control_character_is_shown_escaped() -> None:
    from faultday.scenario.loader import _Validator

    v = _Validator(parse_text('apiVersion: faultday/v1\n"\\e[31mred": 1\n', file="x"), None)
    v.run()
    rendered = str(ScenarioError(v.problems))
    assert "\x1b" not in rendered
    assert "'\\x1b[31mred': unknown key" in rendered

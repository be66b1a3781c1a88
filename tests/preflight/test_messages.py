"""What `faultday preflight` says when a file is wrong or a stack is half down: what is
wrong, where, and what would be valid, in the order of the file."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import psutil
from tests.conftest import faultday, wait_for
from tests.preflight.conftest import copy_local, line_of, running_stack

from faultday.core.exits import ExitCode


def _positions(stderr: str, file: Path) -> list[tuple[int, int]]:
    """(line, col) of each `error FILE:line:col:` the command printed, in its order."""
    found = re.findall(rf"^error {re.escape(str(file))}:(\d+):(\d+):", stderr, re.MULTILINE)
    return [(int(line), int(col)) for line, col in found]


def _preflight_file(folder: Path, spec: str) -> Path:
    f = folder / "bad.preflight.yaml"
    f.write_text("apiVersion: faultday/v1\nkind: Preflight\nspec:\n" + spec)
    return f


def test_an_unknown_key_in_the_profiles_preflight_says_did_you_mean(tmp_path: Path) -> None:
    profile = copy_local(tmp_path)
    text = profile.read_text()
    # The profile's own preflight block (a flow mapping, `{}`, or a block of keys) gives
    # way to one with two misspelt keys.
    found = re.findall(r"^  preflight:.*$", text, re.MULTILINE)
    assert len(found) == 1, found
    block = (
        "  preflight:\n"
        "    concurency: 3\n"
        "    golden:\n"
        "      - {name: x, component: agent, methd: POST}"
    )
    if found[0].split("#")[0].rstrip().endswith("{}"):
        text = text.replace(found[0], block)
    else:
        text = text.replace(found[0], block.replace("  preflight:\n", found[0] + "\n", 1))
    profile.write_text(text)
    r = faultday("preflight", "--profile", str(profile), "--report-dir", str(tmp_path / "r"))
    assert r.returncode == ExitCode.INVALID, r.stderr
    err = " ".join(r.stderr.split())
    golden = line_of(profile, "methd: POST")
    assert f"{profile}:{golden}:" in err
    assert "spec.preflight.golden[0].methd: unknown key; did you mean 'method'?" in err
    assert "spec.preflight.concurency: unknown key; did you mean 'concurrency'?" in err
    assert not (tmp_path / "r").exists(), "nothing started"


def test_a_json_schema_that_is_not_one_says_what_is_wrong_and_what_is_valid(
    tmp_path: Path,
) -> None:
    f = _preflight_file(
        tmp_path,
        "  golden:\n"
        "    - {name: a, component: agent, expect: {json_schema: [query]}}\n"
        '    - {name: b, component: agent, expect: {json_schema: \'{"type": "object"}\'}}\n'
        "    - {name: c, component: agent, expect: {json_schema: {type: objekt}}}\n"
        "    - {name: d, component: agent, expect: {json_schema: {required: query}}}\n"
        "    - {name: e, component: agent, expect: {json_schema: {type: object}}}\n",
    )
    r = faultday("preflight", "--config", str(f), "--report-dir", str(tmp_path / "r"))
    assert r.returncode == ExitCode.INVALID, r.stderr
    lines = r.stderr.splitlines()
    assert "valid dictionary" not in r.stderr
    assert len(lines) == 4, "the valid schema is not a problem"
    valid = "a JSON Schema is a mapping of keywords such as {type: object, required: [query]}"
    said = {int(line.split(":")[1]): line.split(": ", 1)[1] for line in lines}
    at = "spec.golden[{}].expect.json_schema: "
    assert said == {
        5: at.format(0) + f"{valid}, not a list",
        6: at.format(1) + f"{valid}, not a string holding JSON "
        "(write the object itself, without the quotes)",
        7: at.format(2) + "not a valid JSON Schema: type: 'objekt' is not valid under any of "
        "the given schemas (a type is one of array, boolean, integer, null, number, object, "
        "string)",
        8: at.format(3) + "not a valid JSON Schema: required: 'query' is not of type 'array'",
    }, r.stderr
    assert all(line.startswith(f"error {f}:") for line in lines)


def test_the_problems_are_in_the_order_of_the_file(tmp_path: Path) -> None:
    # The model's field order is golden, skip, concurrency, …, log_ignore: not the file's.
    f = _preflight_file(
        tmp_path,
        "  log_ignore:\n"
        "    - {pattern: 'unclosed (', why: a typo}\n"
        "  concurrency: lots\n"
        "  golden:\n"
        "    - {name: x, component: agent, methd: GET}\n"
        "  skip: 3\n",
    )
    r = faultday("preflight", "--config", str(f), "--report-dir", str(tmp_path / "r"))
    assert r.returncode == ExitCode.INVALID, r.stderr
    found = _positions(r.stderr, f)
    assert [line for line, _ in found] == [5, 6, 8, 9], r.stderr
    assert found == sorted(found)


def test_a_stack_with_one_component_down_names_it_and_says_the_others_are_up(
    tmp_path: Path,
) -> None:
    sleeper = '["{python}", "-c", "import time; time.sleep(600)"]'
    profile = tmp_path / "three.yaml"
    profile.write_text(
        "apiVersion: faultday/v1\nkind: StackProfile\nmetadata: {name: three}\n"
        "spec:\n  proxy: null\n  components:\n"
        + "".join(
            f"    {name}: {{command: {sleeper}, ready: {{kind: none}}}}\n"
            for name in ("a", "b", "c")
        )
    )
    with running_stack(profile, tmp_path) as r:
        pid = r.stack.target("b").pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not psutil.pid_exists(pid), 10, "b to be gone")
        out = faultday(
            "preflight",
            "--profile",
            str(profile),
            "--state-dir",
            str(r.state_dir),
            "--report-dir",
            str(tmp_path / "r"),
        )
    assert out.returncode == ExitCode.INVALID, out.stderr
    err = " ".join(out.stderr.split())
    assert f"{r.state_dir}: 1 of 3 components down (b); the other 2 are up" in err
    assert "the stack there is not running" not in err

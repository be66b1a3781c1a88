"""The ``faultday`` command as a user runs it: sub-commands that cannot be imported, and the
exit codes every command returns (the README's table, mapped in one place)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT, faultday

from faultday.core.exits import ExitCode

# A sub-command's module made unimportable the way a missing optional extra does it:
# the import system raises ImportError for it.
BROKEN_IMPORT = (
    "import sys; sys.modules[{module!r}] = None; "
    "sys.argv = ['faultday', *sys.argv[1:]]; "
    "from faultday.cli import main; main()"
)


def _with_broken(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    code = BROKEN_IMPORT.format(module=module)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_a_subcommand_whose_module_fails_to_import_is_listed_with_the_error() -> None:
    help_ = _with_broken("faultday.cli_report", "--help")
    assert help_.returncode == ExitCode.PASSED, help_.stderr
    rows = {m.group(1): m.group(2) for m in re.finditer(r"│ (\w+)\s+(.*?)\s*│", help_.stdout)}
    for name in ("report", "gameday", "runbook"):
        assert rows[name].startswith("UNAVAILABLE: faultday.cli_report failed to import"), rows
    assert "UNAVAILABLE" not in rows["stack"]  # the others are still there, as they were

    ran = _with_broken("faultday.cli_report", "gameday", "scenarios", "--tag", "x")
    assert ran.returncode == ExitCode.ERROR
    assert "faultday gameday is unavailable: faultday.cli_report failed to import" in ran.stderr


def _readme_codes() -> dict[int, str]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Exit codes") :].split("\n\n")[1]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d) \| (.+?) \|$", table, re.M)}


def test_the_readme_lists_every_exit_code_and_no_other() -> None:
    codes = _readme_codes()
    assert sorted(codes) == sorted(int(c) for c in ExitCode)
    for code in ExitCode:
        assert codes[code].split(":")[0] == code.meaning, codes[code]


BAD_SCENARIO = "apiVersion: faultday/v1\nkind: Scenario\nmetadata: {name: x}\nspec: {}\n"
BAD_PROFILE = "apiVersion: faultday/v1\nkind: StackProfile\nmetadata: {name: x}\nspec: {}\n"
GOOD_SCENARIO = ROOT / "scenarios" / "prompt-injection-tool-misuse.scenario.yaml"
ALLOWLIST = (
    "apiVersion: faultday/v1\nkind: KubernetesTarget\n"
    "spec: {namespace: gameday, allowed_namespaces: [gameday]}\n"
)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "bad.scenario.yaml").write_text(BAD_SCENARIO)
    (tmp_path / "bad.yaml").write_text(BAD_PROFILE)
    (tmp_path / "target.yaml").write_text(ALLOWLIST)
    (tmp_path / "empty").mkdir()
    (tmp_path / "stack").symlink_to(ROOT / "stack")
    return tmp_path


# (command line, the README's code for what goes wrong); {t} is the test's folder.
CASES = [
    (["validate", "{t}/bad.scenario.yaml"], ExitCode.INVALID),
    (["run", "{t}/bad.scenario.yaml"], ExitCode.INVALID),
    (["run", "--driver", "nope", str(GOOD_SCENARIO)], ExitCode.INVALID),
    (["recover", "{t}/empty"], ExitCode.INVALID),
    (["report", "{t}/empty"], ExitCode.INVALID),
    (["gameday", "{t}/empty", "--no-progress"], ExitCode.INVALID),
    (["runbook", "render", "--stack", "{t}/bad.yaml", "--out", "{t}/rb"], ExitCode.INVALID),
    (["stack", "up", "--profile", "{t}/bad.yaml", "--state-dir", "{t}/s"], ExitCode.INVALID),
    (["stack", "render", "--driver", "nope", "--out", "{t}/r"], ExitCode.INVALID),
    (["stack", "status", "--state-dir", "{t}/empty"], ExitCode.FAILED),
    (["k8s", "plan", "--profile", "{t}/bad.yaml"], ExitCode.INVALID),
    (["k8s", "plan", "-c", "{t}/target.yaml", "-n", "prod"], ExitCode.ERROR),
    (["no-such-command"], ExitCode.INVALID),
]


@pytest.mark.parametrize(
    ("args", "expected"), CASES, ids=[f"{' '.join(a[:2])}-{e.name}" for a, e in CASES]
)
def test_each_command_returns_the_readme_code(
    files: Path, args: list[str], expected: ExitCode
) -> None:
    r = faultday(*(a.format(t=files) for a in args), cwd=files)
    assert r.returncode == expected, r.stdout + r.stderr
    assert "Traceback" not in r.stderr

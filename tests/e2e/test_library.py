"""The scenario library (scenarios/): valid, documented, and red under the naive policy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT, faultday

from faultday.scenario.loader import load_scenario

SCENARIOS = ROOT / "scenarios"
FILES = sorted(SCENARIOS.glob("*.scenario.yaml"))
SCHEMA_LINE = "# yaml-language-server: $schema=../schema/scenario.schema.json"
MUST_FAIL_NAIVE = {"gpu-loss", "retry-storm", "tool-overload"}


def _load(path: Path):  # type: ignore[no-untyped-def]
    return load_scenario(path).scenario


def test_the_whole_library_validates() -> None:
    result = faultday("validate", str(SCENARIOS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(FILES) >= 15
    for path in FILES:
        assert f"ok {path.relative_to(ROOT)}" in result.stdout or path.name in result.stdout


@pytest.mark.parametrize("path", FILES, ids=[p.name.removesuffix(".scenario.yaml") for p in FILES])
def test_each_scenario_is_named_after_its_file_with_schema_and_runbook(path: Path) -> None:
    assert path.read_text().splitlines()[0] == SCHEMA_LINE
    scenario = _load(path)
    assert scenario.name == path.name.removesuffix(".scenario.yaml")
    assert scenario.metadata.title and scenario.metadata.description
    if scenario.metadata.runbook is not None:
        assert (ROOT / "runbooks" / f"{scenario.metadata.runbook}.md.j2").exists()
    assert scenario.spec.stack == "local"
    assert scenario.spec.policy is None  # the policy comes from the stack, or --faultday-policy


def test_naive_expectations_name_checks_the_scenario_has() -> None:
    marked = set()
    for path in FILES:
        scenario = _load(path)
        naive = scenario.metadata.naive
        if naive is None:
            continue
        marked.add(scenario.name)
        checks = {c.check for c in (*scenario.spec.steady_state, *scenario.spec.expect)}
        assert set(naive.fails) <= checks, (scenario.name, naive.fails, checks)
    assert marked >= MUST_FAIL_NAIVE


def test_readme_has_one_line_per_scenario_and_a_small_demo() -> None:
    readme = (SCENARIOS / "README.md").read_text()
    names = [_load(p).name for p in FILES]
    for name in names:
        assert re.search(rf"^\|\s*`{re.escape(name)}`", readme, re.M), name
    demo = [n for p, n in zip(FILES, names, strict=True) if "demo" in _load(p).metadata.tags]
    assert 3 <= len(demo) <= 5, demo  # `make demo` fits in ~4 min


@pytest.mark.slow
def test_naive_marked_scenarios_fail_under_naive_for_the_stated_reason(tmp_path: Path) -> None:
    """Under ``--faultday-policy naive`` each marked scenario fails, and for its stated reason."""
    marked = [p for p in FILES if _load(p).metadata.naive is not None]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *[str(p) for p in marked],
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--faultday-policy",
            "naive",
            "--faultday-time-scale",
            "0.1",
            "--faultday-report-dir",
            str(tmp_path / "reports"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60 * 15,
        env=env,
        check=False,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-4000:]
    assert f"{len(marked)} failed" in out, out[-4000:]
    for path in marked:
        naive = _load(path).metadata.naive
        assert f"naive policy: failed as expected — {naive.because}" in out, (
            path.name,
            out[-4000:],
        )
    assert "not for the stated reason" not in out
    assert "expected to fail" not in out

"""The pytest plugin, driven by pytester: scenarios as items, markers, failures, fixtures."""

from __future__ import annotations

import shutil

import pytest
from tests.conftest import ROOT

pytest_plugins = ["pytester"]
DATA = ROOT / "tests" / "engine" / "data"


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copy(DATA / "procs.stack.yaml", pytester.path / "procs.stack.yaml")
    shutil.copy(DATA / "pause.scenario.yaml", pytester.path / "pause.scenario.yaml")
    return pytester


def test_a_scenario_is_an_item_with_its_tags_as_markers(suite: pytest.Pytester) -> None:
    result = suite.runpytest("--collect-only", "-q", "-m", "engine")
    result.stdout.fnmatch_lines(["pause.scenario.yaml::pause-ticker"])
    assert suite.runpytest("--collect-only", "-q", "-m", "not engine").ret == 5


def test_a_passing_scenario_passes_and_lands_in_junit(suite: pytest.Pytester) -> None:
    junit = suite.path / "junit.xml"
    result = suite.runpytest(
        "--faultday-time-scale",
        "0.5",
        "--faultday-report-dir",
        str(suite.path / "reports"),
        f"--junitxml={junit}",
    )
    result.assert_outcomes(passed=1)
    xml = junit.read_text()
    assert 'name="pause-ticker"' in xml
    assert 'name="faultday_verdict" value="passed"' in xml


def test_a_failing_scenario_shows_its_failed_checks_and_report(suite: pytest.Pytester) -> None:
    text = (DATA / "pause.scenario.yaml").read_text().replace(
        "at: 2s, duration: 1s}",
        "at: 1.5s, duration: 2s}",  # a margin for busy machines
    ) + (
        "  expect:\n    - {during: freeze-web, check: health, target: web, path: /, timeout: 0.2}\n"
    )
    (suite.path / "pause.scenario.yaml").write_text(text)
    result = suite.runpytest("--faultday-report-dir", str(suite.path / "r"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*FAILED: 1 of 3 checks did not pass*",
            "*✗ during freeze-web: health web expected / → 200, observed no answer*",
            f"*report: {suite.path / 'r'}*",
        ]
    )


def test_an_invalid_scenario_is_a_collection_error_with_file_and_line(
    suite: pytest.Pytester,
) -> None:
    text = (
        (DATA / "pause.scenario.yaml")
        .read_text()
        .replace("process_pause, target: ticker", "process_paus, target: ticker")
    )
    (suite.path / "bad.scenario.yaml").write_text(text)
    result = suite.runpytest("--collect-only")
    result.stdout.fnmatch_lines(["*ERROR collecting bad.scenario.yaml*"])
    assert (
        "bad.scenario.yaml:16:30: spec.faults[0].inject: unknown injector 'process_paus'; "
        "did you mean 'process_pause'?" in result.stdout.str()
    )
    assert result.ret == 2


def test_inject_fixture_reverts_even_when_the_test_fails(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_py_scenario="""
        import os, psutil

        def _state(stack, name):
            return psutil.Process(stack.target(name).pid).status()

        def test_pause(faultday_stack, inject):
            with inject("process_pause", target="ticker"):
                assert _state(faultday_stack, "ticker") == psutil.STATUS_STOPPED
            assert _state(faultday_stack, "ticker") != psutil.STATUS_STOPPED

        def test_fails_inside(faultday_stack, inject):
            with inject("process_pause", target="web"):
                assert False, "boom"

        def test_after(faultday_stack):
            assert _state(faultday_stack, "web") != psutil.STATUS_STOPPED
        """
    )
    result = suite.runpytest("--faultday-stack", "procs.stack.yaml", "-p", "no:randomly")
    result.assert_outcomes(passed=3, failed=1)  # the copied YAML scenario runs too


@pytest.mark.slow  # ~30 s, two stacks: make test-slow (CI runs it)
def test_scenarios_share_one_stack_until_one_changes_it(suite: pytest.Pytester) -> None:
    text = (DATA / "pause.scenario.yaml").read_text()
    (suite.path / "second.scenario.yaml").write_text(
        text.replace("name: pause-ticker", "name: second")
    )
    kill = text.replace("name: pause-ticker", "name: third").replace(
        "inject: process_pause, target: ticker, at: 1s, duration: 3s}",
        "inject: process_kill, target: ticker, at: 1s, duration: 3s, with: {restart: false}}",
    )
    (suite.path / "third.scenario.yaml").write_text(kill)
    (suite.path / "zz-last.scenario.yaml").write_text(
        text.replace("name: pause-ticker", "name: last")
    )
    reports = suite.path / "reports"
    result = suite.runpytest("--faultday-report-dir", str(reports), "-p", "no:randomly")
    result.assert_outcomes(passed=4)
    (pool,) = reports.glob("pytest-stacks-*")
    # Three scenarios ran on stack 1; the third left the ticker dead, so the last got stack 2.
    assert sorted(p.name for p in pool.iterdir() if p.is_dir()) == ["stack-1", "stack-2"]

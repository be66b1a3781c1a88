"""The game day runs `faultday preflight` first and refuses to start on a failure unless
told to skip it; the scorecard shows it. A `*.preflight.yaml` file is a pytest item.

The stacks here are one LLM simulator each (a second or two to start); the one whose
``--max-model-len`` is too short fails the preflight.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import faultday

from faultday.core.events import RunEvents
from faultday.core.exits import ExitCode
from faultday.core.journal import RunVerdict
from faultday.core.vocab import Verdict
from faultday.gameday import run_gameday
from faultday.preflight.runner import PreflightOptions, run_preflight
from faultday.report.gameday import read_gameday

pytest_plugins = ["pytester"]

PROFILE = """\
apiVersion: faultday/v1
kind: StackProfile
metadata: {{name: one-llm}}
spec:
  proxy: null
  components:
    llm:
      type: llmsim
      args: ["--model", "sim", "--max-model-len", "{mlen}"]
"""
SCENARIO = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: one-llm-steady, title: the simulator stays healthy}
spec:
  stack: one-llm.yaml
  duration: 1s
  warmup: 0s
  recovery: 0s
  load: {workload: none}
  steady_state:
    - {check: health, target: llm, path: /health, status: 200}
"""


def _suite(folder: Path, mlen: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "one-llm.yaml").write_text(PROFILE.format(mlen=mlen))
    (folder / "steady.scenario.yaml").write_text(SCENARIO)
    return folder


def test_a_failing_preflight_stops_the_game_day_and_the_scorecard_says_why(
    tmp_path: Path,
) -> None:
    suite = _suite(tmp_path / "s", mlen=64)
    gd, folder = run_gameday([suite], report_dir=tmp_path / "r", base_dir=tmp_path)
    assert gd.preflight is not None and gd.preflight.verdict == "failed"
    assert gd.scenarios == [] and gd.verdict == RunVerdict.FAILED
    assert any("llm: max_model_len" in p and "args[3]" in p for p in gd.preflight.problems)
    assert read_gameday(folder).preflight == gd.preflight
    page = (folder / "index.html").read_text()
    assert 'id="preflight"' in page and "did not start" in page and "max_model_len" in page
    assert (folder / "preflight" / "report.html").is_file()


def test_skip_preflight_runs_the_game_day_and_the_scorecard_says_it_was_skipped(
    tmp_path: Path,
) -> None:
    suite = _suite(tmp_path / "s", mlen=64)
    gd, folder = run_gameday([suite], report_dir=tmp_path / "r", base_dir=tmp_path, preflight=False)
    assert gd.preflight is not None and gd.preflight.verdict == "skipped"
    assert [s.name for s in gd.scenarios] == ["one-llm-steady"]
    assert "--skip-preflight" in (folder / "index.html").read_text()


def test_a_passing_preflight_shares_its_stack_with_the_first_scenario(tmp_path: Path) -> None:
    suite = _suite(tmp_path / "s", mlen=8192)
    events: list[str] = []
    hooks = RunEvents()
    hooks.preflight_started.add_listener(
        lambda ev: events.append(f"preflight {Path(ev.profile).name}")
    )
    hooks.preflight_done.add_listener(lambda ev: events.append(f"preflight {ev.verdict}"))
    hooks.scenario_started.add_listener(lambda ev: events.append(f"start {ev.scenario}"))
    gd, _ = run_gameday([suite], report_dir=tmp_path / "r", base_dir=tmp_path, events=hooks)
    assert gd.preflight is not None and gd.preflight.verdict == "passed", gd.preflight
    assert [(s.verdict, s.reason) for s in gd.scenarios] == [
        (RunVerdict.PASSED, "the one check passed")
    ]
    assert sum("up for" in n for n in gd.stack_notes) == 1, gd.stack_notes  # one stack start
    # A live display hears of the preflight before the first scenario starts.
    assert events == ["preflight one-llm.yaml", "preflight passed", "start one-llm-steady"]


def test_the_gameday_command_says_the_preflight_failed_what_failed_and_that_nothing_ran(
    tmp_path: Path,
) -> None:
    suite = _suite(tmp_path / "s", mlen=64)
    r = faultday(
        "gameday", str(suite), "--no-progress", "--report-dir", str(tmp_path / "r"), cwd=tmp_path
    )
    assert r.returncode == ExitCode.FAILED, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert "preflight of s/one-llm.yaml …" in lines  # relative to where the command runs
    assert any(line.startswith("FAILED   preflight — ") for line in lines), r.stderr
    assert any("✗ preflight" in line and "max_model_len" in line for line in lines), r.stderr
    assert "the game day did not start" in r.stderr
    assert not any(line.startswith("[1/1]") for line in lines)  # no scenario started
    assert "Traceback" not in r.stderr


PREFLIGHT_ITEM = """\
apiVersion: faultday/v1
kind: Preflight
stack: one-llm.yaml
spec: {{max_prompt_tokens: {prompt}, max_tokens: 16, concurrency: 2}}
"""


@pytest.mark.slow  # a pytest session in a subprocess, starting its own stack: 6 s each
@pytest.mark.parametrize(("prompt", "outcome"), [(32, "passed"), (4000, "failed")])
def test_a_preflight_file_is_a_pytest_item(
    pytester: pytest.Pytester, prompt: int, outcome: str
) -> None:
    pytester.makefile(".yaml", **{"one-llm": PROFILE.format(mlen=1024)})
    pytester.makefile(".preflight.yaml", check=PREFLIGHT_ITEM.format(prompt=prompt))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--faultday-report-dir={pytester.path / 'reports'}"
    )
    result.assert_outcomes(**{outcome: 1})
    if outcome == "failed":
        result.stdout.fnmatch_lines(["*llm: max_model_len*expected ≥ 4016*observed 1024*"])


def test_kv_cache_headroom_fails_when_the_target_concurrency_fills_the_cache(
    tmp_path: Path,
) -> None:
    # 64 blocks of 16 tokens (1024); 4 requests of 200 + 64 tokens want 1056: the cache fills.
    (tmp_path / "one-llm.yaml").write_text(
        PROFILE.format(mlen=8192).replace(
            '"--max-model-len"', '"--num-gpu-blocks", "64", "--block-size", "16", "--max-model-len"'
        )
    )
    f = tmp_path / "kv.preflight.yaml"
    f.write_text(
        "apiVersion: faultday/v1\nkind: Preflight\n"
        "spec: {concurrency: 4, max_prompt_tokens: 200, max_tokens: 64}\n"
    )
    outcome = run_preflight(
        PreflightOptions(
            profile=str(tmp_path / "one-llm.yaml"),
            base_dir=tmp_path,
            report_dir=tmp_path / "r",
            config=f,
        )
    )
    (kv,) = [c for c in outcome.journal.checks if c.check == "kv_cache"]
    assert kv.verdict == Verdict.FAILED, kv
    assert kv.label == "llm: KV cache at 4 concurrent requests"
    peak = float(kv.observed.split()[1].rstrip("%")) / 100
    assert 0.8 < peak <= 1.0
    assert outcome.journal.verdict == RunVerdict.FAILED

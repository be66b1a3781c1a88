"""The loader: every problem at once, with file:line:col and YAML path; never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from tests.conftest import ROOT, faultday

from faultday.errors import ScenarioError
from faultday.scenario.loader import load_scenario
from faultday.scenario.schema import scenario_schema
from faultday.session import target_resolver

BROKEN = sorted((Path(__file__).parent / "broken").glob("*.scenario.yaml"))


def _expectation(path: Path) -> tuple[int, int, str]:
    header = path.read_text().splitlines()[0].removeprefix("# expect: ")
    line, col, message = header.split(":", 2)
    return int(line), int(col), message.strip()


def test_the_corpus_is_large_enough() -> None:
    assert len(BROKEN) >= 30


@pytest.mark.parametrize(
    "path", BROKEN, ids=[p.name.removesuffix(".scenario.yaml") for p in BROKEN]
)
def test_each_broken_scenario_names_its_problem(path: Path) -> None:
    line, col, message = _expectation(path)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, resolve_targets=target_resolver(ROOT))
    rendered = [str(p) for p in info.value.problems]
    wanted = f"{path}:{line}:{col}: "
    assert any(r.startswith(wanted) and message in r for r in rendered), rendered


def test_validate_reports_every_file_with_exit_2_and_no_traceback() -> None:
    r = faultday("validate", "tests/scenario/broken")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout
    for path in BROKEN:
        line, col, message = _expectation(path)
        rel = path.relative_to(ROOT)
        assert f"{rel}:{line}:{col}: " in r.stderr, path.name
        assert message.split("'")[0] in r.stderr
    assert f"{len(BROKEN)} of {len(BROKEN)} scenarios invalid" in r.stderr


def test_all_problems_are_reported_in_one_pass(tmp_path: Path) -> None:
    text = (Path(__file__).parent / "broken" / "unknown-target.scenario.yaml").read_text()
    text = text.replace("duration: 20s", "duration: 20").replace(
        "check: health, target: web}\n  faults", "check: helth}\n  faults"
    )
    text = text.replace(
        "../../engine/data/procs.stack.yaml", str(ROOT / "tests/engine/data/procs.stack.yaml")
    )
    path = tmp_path / "many.scenario.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, resolve_targets=target_resolver(ROOT))
    messages = " | ".join(p.message for p in info.value.problems)
    assert "has no unit" in messages
    assert "unknown check 'helth'" in messages
    assert "unknown target 'tikcer'" in messages
    lines = [p.line for p in info.value.problems]
    assert lines == sorted(lines)


def test_run_of_an_invalid_scenario_exits_2_without_a_traceback() -> None:
    r = faultday("run", str(BROKEN[0]), "--report-dir", "/nonexistent/never-created")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert not Path("/nonexistent/never-created").exists()


def test_a_missing_file_is_a_clear_error() -> None:
    r = faultday("validate", "no/such.scenario.yaml")
    assert r.returncode == 2
    assert "no/such.scenario.yaml:1:1: no such file" in r.stderr


def test_committed_schema_equals_the_generated_one() -> None:
    committed = json.loads((ROOT / "schema" / "scenario.schema.json").read_text())
    assert committed == scenario_schema(), "run: faultday schema --out schema/scenario.schema.json"


def test_schema_accepts_the_engine_scenarios_and_rejects_unknown_keys() -> None:
    schema = scenario_schema()
    for path in (ROOT / "tests" / "engine" / "data").glob("*.scenario.yaml"):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    bad = yaml.safe_load(
        (ROOT / "tests/scenario/broken/unknown-spec-key.scenario.yaml").read_text()
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)

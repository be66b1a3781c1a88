"""docs/architecture.md stays true: its layers table names the modules that exist, its worked
example runs, its catalogue lists every event."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest
from tests.conftest import FAULTDAY, ROOT

from faultday.core.events import HOOKS
from faultday.core.vocab import EventKind

DOC = ROOT / "docs" / "architecture.md"
DATA = ROOT / "tests" / "engine" / "data"
BLOCK = re.compile(r"^```(\w+)\n# file: (\S+)\n(.*?)^```$", re.M | re.S)
PACKAGE = ROOT / "src" / "faultday"
TABLE_HEAD = "| package | what it holds | imports |"
MODULE = re.compile(r"`([a-z_][a-z0-9_]*)`")  # how the table names a module: `trend`


def _blocks() -> dict[str, str]:
    """The doc's code blocks that name their file: ``# file: <path>`` on the first line."""
    found = {name: body for _lang, name, body in BLOCK.findall(DOC.read_text())}
    assert found, "no '# file:' blocks in docs/architecture.md"
    return found


def _install(blocks: dict[str, str], site: Path) -> None:
    """Install the example package the way pip would: modules plus a dist-info's entry points."""
    for name, body in blocks.items():
        if name.startswith("faultday_example/"):
            path = site / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
    (site / "faultday_example" / "__init__.py").write_text("")
    groups = tomllib.loads(blocks["pyproject.toml"])["project"]["entry-points"]
    info = site / "faultday_example-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faultday-example\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
            for group, eps in groups.items()
        )
    )


def _modules(package: Path) -> set[str]:
    """A package's modules and subpackages (``__init__``, ``__main__``, ``_private`` aside)."""
    names = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")}
    return names | {
        p.name for p in package.iterdir() if (p / "__init__.py").is_file() and p.name[0] != "_"
    }


def _layer_rows() -> list[tuple[list[str], str]]:
    """The layers table: each row's package names (first column) and what it holds (second)."""
    lines = DOC.read_text().splitlines()
    start = lines.index(TABLE_HEAD) + 2  # past the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
    assert rows, f"no rows under {TABLE_HEAD!r} in docs/architecture.md"
    return rows


def _parts() -> list[str]:
    """The independent parts: .importlinter's layer of siblings (``faultday.a | faultday.b``)."""
    for line in (ROOT / ".importlinter").read_text().splitlines():
        if " | " in line:
            return [name.strip().removeprefix("faultday.") for name in line.split("|")]
    raise AssertionError(".importlinter has no layer of independent siblings")


def test_the_layers_table_names_every_top_level_module_and_only_those() -> None:
    top = _modules(PACKAGE)
    named = [name for names, _ in _layer_rows() for name in names]
    unknown = [n for n in named if not any(fnmatch(m, n) for m in top)]
    assert not unknown, f"docs/architecture.md's layers table names what is not there: {unknown}"
    missing = sorted(m for m in top if not any(fnmatch(m, n) for n in named))
    assert not missing, f"docs/architecture.md's layers table has no row for {missing}"


def test_the_layers_table_names_only_modules_that_exist() -> None:
    top = _modules(PACKAGE) | _modules(ROOT / "src")  # faultday_refstack, faultday_wire too
    for names, holds in _layer_rows():
        own = set().union(*(_modules(PACKAGE / n) for n in names if (PACKAGE / n).is_dir()))
        unknown = sorted(set(MODULE.findall(holds)) - own - top)
        assert not unknown, f"the row of {names} names modules that do not exist: {unknown}"


def test_the_layers_table_names_every_module_of_each_part() -> None:
    rows = {names[0]: holds for names, holds in _layer_rows() if names}
    for part in _parts():
        assert part in rows, f"docs/architecture.md's layers table has no row for {part}"
        missing = sorted(_modules(PACKAGE / part) - set(MODULE.findall(rows[part])))
        assert not missing, f"the row of {part} in docs/architecture.md does not name {missing}"


def test_the_catalogue_table_lists_every_event_kind() -> None:
    text = DOC.read_text()
    missing = [k.value for k in EventKind if f"| `{k.value}` |" not in text]
    assert not missing, f"docs/architecture.md's event catalogue lacks {missing}"


def test_the_hooks_table_lists_every_hook_with_its_payload_in_catalogue_order() -> None:
    text = DOC.read_text().split("### The run's hooks", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `")]
    want = [
        (
            f"| `{name}`",
            f"`{spec.payload.__name__}`",
            spec.emitter,
            spec.when,
            ", ".join(f"`{f.name}`" for f in dataclasses.fields(spec.payload)) + " |",
        )
        for name, spec in HOOKS.items()
    ]
    assert [tuple(r) for r in rows] == want


@pytest.mark.usefixtures("no_leftovers")
def test_the_worked_example_plugins_run_a_real_scenario(tmp_path: Path) -> None:
    blocks = _blocks()
    site = tmp_path / "site"
    _install(blocks, site)
    (tmp_path / "procs.stack.yaml").write_text((DATA / "procs.stack.yaml").read_text())
    scenario = tmp_path / "freeze.scenario.yaml"
    scenario.write_text(blocks["freeze.scenario.yaml"])
    env = {**os.environ, "PYTHONPATH": str(site), "NO_COLOR": "1", "COLUMNS": "200"}

    listed = subprocess.run(
        [*FAULTDAY, "list", "injectors"], capture_output=True, text=True, env=env, timeout=60
    )
    assert "freeze" in listed.stdout, listed.stdout + listed.stderr

    reports = tmp_path / "reports"
    r = subprocess.run(
        [*FAULTDAY, "run", str(scenario), "--report-dir", str(reports)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 1, r.stdout + r.stderr  # failed: the heartbeat went stale
    (run_dir,) = [p for p in reports.iterdir() if p.is_dir()]
    journal = json.loads((run_dir / "journal.json").read_text())
    verdicts = {c["window"]: c["verdict"] for c in journal["checks"]}
    assert verdicts == {"during freeze": "failed", "after freeze": "passed"}, journal["checks"]
    ledger = [json.loads(x) for x in (run_dir / "ledger.jsonl").read_text().splitlines()]
    reverts = [x for x in ledger if x["op"] == "revert"]
    assert [x["revert"]["injector"] for x in reverts] == ["freeze"]
    assert any(x["op"] == "done" and x["ok"] for x in ledger)
    summary = (run_dir / "summary.txt").read_text()
    assert summary.startswith(f"{journal['run_id']}: failed")
    assert "heartbeat ticker.beat" in summary

"""``faultday validate`` on a generated corpus of broken files: never a traceback, never a hang.

The corpus (``mutations.py``) breaks the real scenarios ~200 ways with a fixed
seed. Each case is loaded in-process as ``faultday validate`` loads it, under a
timer; one subprocess then runs the real command over part of the corpus.
Must hold for every case: no exception but ScenarioError, done well under a
second, every problem at ``file:line:col`` inside the file, no message that
echoes a megabyte back.
"""

from __future__ import annotations

import os
import re
import signal
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from tests.conftest import ROOT, faultday
from tests.scenario.mutations import CASES, MUTATORS, Case, corpus

from faultday.errors import ScenarioError
from faultday.scenario.loader import load_scenario
from faultday.session import target_resolver

# Far above any honest case (the slowest takes ~0.35 s on a busy 2-core box, 1.75 s seen
# beside a real vLLM and a full make test), far below what a quadratic blow-up takes: a
# bound on pathology, not a timing figure (those are bench/'s).
BUDGET_S = 5.0
GUARD_S = 10.0  # a case still running then is a hang: the timer interrupts it
MAX_MESSAGE = 2_000  # characters in one rendered problem
LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>[0-9]+):(?P<col>[0-9]+): \S")


class Hang(Exception):
    pass


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang


def _materialise(case: Case, folder: Path) -> Path:
    here = folder / case.name
    here.mkdir()
    path = here / f"{case.name}.scenario.yaml"
    if case.as_fifo:
        os.mkfifo(path)
        return path
    if case.setup == "self-dir":
        path.mkdir()
        return path
    if case.setup == "fifo":
        os.mkfifo(here / "fifo.yaml")
    elif case.setup == "dir":
        (here / "folder.yaml").mkdir()
    elif case.setup == "loop":
        (here / "loop.yaml").symlink_to(here / "loop.yaml")
    path.write_bytes(case.text_for(here))
    return path


@pytest.fixture(scope="module")
def materialised(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Case, Path]]:
    folder = tmp_path_factory.mktemp("mutations")
    return [(case, _materialise(case, folder)) for case in corpus()]


@pytest.fixture
def alarm() -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def _line_count(path: Path) -> int:
    """An upper bound: every character YAML may take for a line break counts as one."""
    if not path.is_file():
        return 1
    text = path.read_bytes().decode("utf-8", errors="replace")
    return 1 + sum(text.count(c) for c in "\n\r\x85\u2028\u2029")


def _check_problems(exc: ScenarioError, path: Path) -> list[str]:
    wrong = []
    if not exc.problems:
        wrong.append("a ScenarioError without problems")
    for p in exc.problems:
        rendered = str(p)
        where = LOCATED.match(rendered)
        if where is None or p.line < 1 or p.col < 1:
            wrong.append(f"not at file:line:col: {rendered[:200]!r}")
            continue
        if len(rendered) > MAX_MESSAGE:
            wrong.append(f"a message of {len(rendered):,} characters: {rendered[:120]!r}…")
        if not rendered.removeprefix(p.file).isprintable():  # ESC, U+202E, a newline…
            wrong.append(f"a control or format character in: {rendered[:200]!r}")
        if p.file == str(path):
            if p.line > _line_count(path):
                wrong.append(f"line {p.line} is past the end of the file: {rendered[:200]!r}")
        elif not Path(p.file).is_file():  # a problem inside the stack profile it names
            wrong.append(f"a problem in another file, which is not a file: {rendered[:200]!r}")
    return wrong


def test_the_corpus_is_generated_large_and_covers_every_mutator() -> None:
    cases = corpus()
    assert len(cases) >= 186
    assert len(cases) == CASES + 2
    used = {c.name.split("-")[1] for c in cases if c.name[0].isdigit()}
    assert used == {m.__name__ for m in MUTATORS}
    assert corpus() == cases, "the corpus must be the same on every run (fixed seed)"


@pytest.mark.usefixtures("alarm")
def test_no_traceback_no_hang_every_error_located(
    materialised: list[tuple[Case, Path]],
) -> None:
    resolver = target_resolver(ROOT)
    for source in sorted({case.source for case, _ in materialised}):
        load_scenario(source, resolve_targets=resolver)  # valid, and every plugin imported
    failures: list[str] = []
    times: list[tuple[float, str]] = []
    verdicts = {"valid": 0, "invalid": 0}
    for case, path in materialised:
        start = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, GUARD_S)
        try:
            load_scenario(path, resolve_targets=resolver)
            verdicts["valid"] += 1
            problems: list[str] = []
        except ScenarioError as exc:
            verdicts["invalid"] += 1
            problems = _check_problems(exc, path)
        except Hang:
            problems = [f"still running after {GUARD_S:g}s"]
        except BaseException:  # noqa: BLE001 - the point: anything else is a traceback to report
            problems = ["a traceback:\n" + traceback.format_exc(limit=-6)]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        took = time.perf_counter() - start
        times.append((took, case.name))
        if took > BUDGET_S:
            problems.append(f"took {took:.2f}s (budget {BUDGET_S:g}s)")
        failures += [f"{case.name}: {p}" for p in problems]
    times.sort(reverse=True)
    slowest = ", ".join(f"{n} {t * 1000:.0f}ms" for t, n in times[:3])
    print(f"\n{len(materialised)} cases, {verdicts}, slowest: {slowest}")
    assert not failures, "\n".join(failures)
    assert verdicts["invalid"] >= len(materialised) * 3 // 4, verdicts


def test_the_cli_over_the_corpus_prints_no_traceback(
    materialised: list[tuple[Case, Path]], tmp_path: Path
) -> None:
    # One real `faultday validate` over every fourth case and every case whose text is
    # echoed in a message (the process and its printing are the point here; the
    # in-process test above covers every case), hard-linked into one folder.
    echoed = ("weird_key", "long_values_in_messages", "odd_tags", "markup_and_escapes")
    folder = tmp_path / "corpus"
    folder.mkdir()
    chosen = []
    for i, (case, path) in enumerate(materialised):
        if case.as_fifo or case.setup or not (i % 4 == 0 or any(e in case.name for e in echoed)):
            continue
        link = folder / path.name
        os.link(path, link)
        chosen.append(link)
    r = faultday("validate", str(folder), timeout=120)
    output = r.stdout + r.stderr
    assert "Traceback" not in output
    assert r.returncode == 2, output[-2000:]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error ")]
    assert errors
    for line in errors:
        assert LOCATED.match(line.removeprefix("error ")), line[:300]
    oks = sum(1 for ln in r.stdout.splitlines() if ln.startswith("ok "))
    bad = re.search(r"(\d+) of (\d+) scenarios invalid", r.stderr)
    assert bad is not None, r.stderr[-2000:]
    assert int(bad.group(2)) == len(chosen) == oks + int(bad.group(1))

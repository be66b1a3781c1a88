"""The quality check: share of answers with a label in a window; its verdicts and its errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pydantic import ValidationError

from faultday.checks.base import check_registry
from faultday.core.records import AnswerLabel, Observations, RequestRecord
from faultday.core.windows import CheckResult, Verdict, Window, WindowKind
from faultday.errors import ScenarioError
from faultday.scenario.loader import load_scenario

FAULT = Window(WindowKind.FAULT, "during qdrant-down", 10.0, 20.0, fault="qdrant-down")


@dataclass
class Recorded:
    """The part of a CheckContext the quality check reads: recorded observations."""

    observations: Observations = field(default_factory=Observations)


def answers(labels: dict[AnswerLabel, int], *, name: str = "rag") -> Recorded:
    ctx = Recorded()
    recs, t = [], 10.0
    for lab, n in labels.items():
        for _ in range(n):
            recs.append(RequestRecord(t=t, duration=0.1, ok=True, name=name, quality=lab))
            t += 0.05
    ctx.observations.add_requests(recs)
    return ctx


def judge(ctx: Recorded, **params: object) -> CheckResult:
    check = check_registry().get("quality")()
    return check.evaluate(ctx, check.parse(params), FAULT)  # type: ignore[arg-type]


def test_share_of_one_label_or_any_of_several() -> None:
    ctx = answers({AnswerLabel.OFF_TOPIC: 15, AnswerLabel.CANNED: 3, AnswerLabel.OK: 2})
    r = judge(ctx, label=["canned", "off_topic"], min=0.8)
    assert r.verdict == Verdict.PASSED and r.observed == "90%" and r.n == 20
    assert r.message == "off_topic 75%, canned 15%, ok 10%"
    assert judge(ctx, label="ok", min=0.9).verdict == Verdict.FAILED
    assert judge(ctx, label="canned", max=0.1).verdict == Verdict.FAILED
    assert judge(ctx, label="canned", max=0.5).verdict == Verdict.PASSED


def test_too_few_labelled_answers_is_insufficient_never_passed() -> None:
    ctx = answers({AnswerLabel.OK: 9})
    # Task submissions carry no label and do not count.
    ctx.observations.add_requests(
        [
            RequestRecord(t=11.0 + i / 10, duration=0.1, ok=True, name="task.submit")
            for i in range(9)
        ]
    )
    r = judge(ctx, label="ok", min=0.5)
    assert r.verdict == Verdict.INSUFFICIENT and r.n == 9
    assert judge(ctx, label="ok", min=0.5, min_samples=5).verdict == Verdict.PASSED
    assert judge(ctx, label="ok", min=0.5, request="chat").verdict == Verdict.INSUFFICIENT


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"label": "great", "min": 0.5}, "ok"),  # names the valid labels
        ({"label": [], "min": 0.5}, "at least one label"),
        ({"label": "ok", "min": 1.5}, "less than or equal to 1"),
        ({"label": "ok"}, "give min, max or both"),
    ],
)
def test_bad_parameters_say_what_is_valid(params: dict[str, object], why: str) -> None:
    check = check_registry().get("quality")()
    with pytest.raises(ValidationError, match=why):
        check.parse(params)


def test_a_scenario_with_a_wrong_label_fails_validation_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "q.scenario.yaml"
    path.write_text(
        "apiVersion: faultday/v1\nkind: Scenario\nmetadata: {name: q}\nspec:\n"
        "  duration: 10s\n  load: {workload: rag}\n  steady_state:\n"
        "    - {check: quality, label: offtopic, min: 0.5}\n"
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    assert "q.scenario.yaml:8" in text and "off_topic" in text, text

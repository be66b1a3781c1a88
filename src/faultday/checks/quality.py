"""Answer quality: the share of answers in a window that carry a label (docs/checks.md)."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

from pydantic import Field, field_validator

from faultday.checks.base import Check, CheckContext
from faultday.checks.common import Pct, ShareBounds, insufficient, judged, requests_in
from faultday.core.records import AnswerLabel, RequestRecord
from faultday.core.windows import CheckResult, Window


class QualityParams(ShareBounds):
    label: tuple[AnswerLabel, ...] = Field(
        description="an answer label, or a list of them: the share of answers with any of them"
    )
    request: str | None = Field(default=None, description="only requests whose name matches (glob)")
    min_samples: int = Field(default=10, ge=1, description="fewer labelled answers: insufficient")

    @field_validator("label", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("label")
    @classmethod
    def _some(cls, value: tuple[AnswerLabel, ...]) -> tuple[AnswerLabel, ...]:
        if not value:
            raise ValueError("name at least one label: " + ", ".join(AnswerLabel))
        return tuple(dict.fromkeys(value))


class Quality(Check[QualityParams]):
    """Share of the window's answers labelled ``label`` (any of a list) by the load."""

    name: ClassVar[str] = "quality"
    summary: ClassVar[str] = "share of answers labelled ok, canned, off_topic, empty, … in [0, 1]"
    Params = QualityParams

    def evaluate(self, ctx: CheckContext, params: QualityParams, window: Window) -> CheckResult:
        label = f"quality {'/'.join(params.label)}"
        answers = [r for r in requests_in(ctx, window, params.request) if r.quality]
        if len(answers) < params.min_samples:
            return insufficient(
                self.name,
                label,
                window,
                n=len(answers),
                need=params.min_samples,
                what="labelled answers",
            )
        hit = sum(1 for r in answers if r.quality in params.label)
        return judged(
            self.name,
            label,
            window,
            hit / len(answers),
            bounds=params,
            fmt=Pct(),
            n=len(answers),
            message=label_mix(answers),
        )


def label_mix(answers: list[RequestRecord]) -> str:
    """``ok 81%, off_topic 17%, error 2%``: every label seen, most common first."""
    counts = Counter(r.quality for r in answers)
    total = sum(counts.values())
    return ", ".join(f"{k} {n / total:.0%}" for k, n in counts.most_common())

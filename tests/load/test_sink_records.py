"""The sink's event lines → RequestRecords: a wrong type is a bad line, never a crash."""

from __future__ import annotations

import pytest

from faultday.load.sink import to_record


def test_an_event_line_becomes_a_record() -> None:
    ev: dict[str, object] = {
        "d": 0.25, "ok": True, "s": 200, "n": "chat", "ttft": "0.05",
        "itl": [0.01, 0.02], "tok": 12, "deg": 1, "r": ["fallback"], "m": "m1",
    }  # fmt: skip
    r = to_record(ev, 1.2345678)
    assert (r.t, r.duration, r.status, r.ttft, r.itl, r.tokens) == (
        1.234568,
        0.25,
        200,
        0.05,
        (0.01, 0.02),
        12,
    )
    assert r.ok and r.degraded and r.reasons == ("fallback",) and r.model == "m1"


@pytest.mark.parametrize(
    "bad",
    [{"d": None}, {"d": [1]}, {"d": 1, "s": [1]}, {"d": 1, "itl": 5}, {"d": 1, "r": 3},
     {"d": 1, "ttft": {}}, {"d": "slow"}, {"d": 1, "tok": [2]}],
)  # fmt: skip
def test_a_wrong_type_is_a_bad_line(bad: dict[str, object]) -> None:
    with pytest.raises((TypeError, ValueError)):
        to_record(bad, 0.0)

"""The sample of quoted answers: every answer up to the cap, then a fair, bounded reservoir."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from faultday.core import records
from faultday.core.records import AnswerLabel, Observations
from faultday.core.scenario import Scenario
from faultday.load.quality import Reservoir, first_bytes
from faultday.load.runner import answer_edges
from faultday.load.sink import EventSink, to_record


def test_every_answer_up_to_the_cap_then_indices_below_it() -> None:
    r = Reservoir(cap=5, edges=(0.0, 10.0), seed=1)
    assert [r.offer(1.0) for _ in range(5)] == [(1, i) for i in range(5)]
    later = [r.offer(2.0) for _ in range(1000)]
    kept = [k for k in later if k is not None]
    assert kept and all(slot == 1 and 0 <= i < 5 for slot, i in kept)
    # Algorithm R keeps the k-th answer with probability cap/k: about 5·ln(1005/5) ≈ 26 more.
    assert 10 < len(kept) < 60
    # Slots are separate: warm-up (before 0), [0, 10), [10, …).
    assert r.offer(-1.0) == (0, 0) and r.offer(10.0) == (2, 0)
    assert Reservoir(cap=0, edges=(0.0,), seed=1).offer(1.0) is None


def test_the_reservoir_is_fair() -> None:
    """Each of 100 answers stays with probability cap/n = 0.1 (2000 trials, ~200 ± 13 each)."""
    stays: Counter[int] = Counter()
    for trial in range(2000):
        r = Reservoir(cap=10, edges=(0.0,), seed=trial)
        slots: dict[int, int] = {}
        for k in range(100):
            kept = r.offer(1.0)
            if kept is not None:
                slots[kept[1]] = k
        stays.update(slots.values())
    assert len(stays) == 100
    assert min(stays.values()) > 130 and max(stays.values()) < 270


def test_the_harness_keeps_one_text_per_slot_index_whatever_arrives() -> None:
    """10 000 quoted answers in 3 slots with a cap of 7 leave at most 21 texts in memory."""
    obs = Observations()
    r = Reservoir(cap=7, edges=(0.0, 10.0, 20.0), seed=3)
    rng = random.Random(3)
    records = []
    for k in range(10_000):
        t = rng.uniform(0, 30)
        ev: dict[str, object] = {"ts": 1000.0 + t, "d": 0.1, "ok": True, "s": 200, "n": "rag"}
        ev["q"] = str(rng.choice(list(AnswerLabel)))
        kept = r.offer(t)
        if kept is not None:
            ev.update(qa=f"answer {k}", qk=[0, *kept], qs=["1", "2"], qc=["2"])
        records.append(to_record(ev, t))
    obs.add_requests(records)
    assert len(obs.requests) == 10_000 and all(x.sample is None for x in obs.requests)
    assert all(x.quality in set(AnswerLabel) for x in obs.requests)
    samples = obs.answer_samples()
    assert len(samples) == 3 * 7  # every index of every slot, each holding its latest text
    assert all(s.sources == ("1", "2") and s.cited == ("2",) for s in samples)


@pytest.mark.parametrize(
    "bad",
    [{"q": "great"}, {"q": "ok", "qa": "x", "qk": [1, 2]}, {"q": "ok", "qa": "x", "qk": "abc"}],
)
def test_a_line_with_a_bad_label_or_slot_is_a_bad_line(bad: dict[str, object]) -> None:
    got: list[object] = []
    sink = EventSink(got.extend, lambda wall: wall - 1000.0)
    try:
        line = {"ts": 1001.0, "d": 0.1, "ok": True, "s": 200, "n": "rag", **bad}
        sink._handle([json.dumps(line).encode()])
        sink._flush_pending(final=True)
    finally:
        sink.stop()
    assert got == [] and sink.stats.bad_lines == 1


def test_first_bytes_never_split_a_character() -> None:
    text = "é" * 150  # 2 bytes each
    cut = first_bytes(text, 201)
    assert len(cut.encode()) == 200 and cut == "é" * 100
    assert first_bytes("short", 200) == "short"


def test_slot_edges_are_the_bounds_of_the_windows() -> None:
    sc = Scenario.model_validate(
        {
            "apiVersion": "faultday/v1",
            "kind": "Scenario",
            "metadata": {"name": "edges"},
            "spec": {
                "duration": "180s",
                "recovery": "40s",
                "load": {"workload": "rag"},
                "faults": [
                    {
                        "name": "a",
                        "inject": "vector_outage",
                        "target": "agent->qdrant",
                        "at": "30s",
                        "duration": "50s",
                    }
                ],
            },
        }
    )
    assert answer_edges(sc.spec) == (0.0, 30.0, 80.0, 120.0)


def test_made_up_keys_cannot_grow_the_store_past_its_backstop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(records, "MAX_ANSWER_SAMPLES", 10)
    obs = Observations()
    lines = [
        {
            "ts": 1000.0 + k,
            "d": 0.1,
            "ok": True,
            "s": 200,
            "n": "rag",
            "q": "ok",
            "qa": f"a{k}",
            "qk": [0, 0, k],
        }
        for k in range(25)
    ]
    obs.add_requests(to_record(ev, float(k)) for k, ev in enumerate(lines))
    assert len(obs.requests) == 25 and len(obs.answers) == 10
    # A known key is still replaced: the reservoir's own replacements always land.
    obs.add_requests([to_record({**lines[0], "qa": "newer"}, 30.0)])
    assert obs.answers[(0, 0, 0)].text == "newer" and len(obs.answers) == 10

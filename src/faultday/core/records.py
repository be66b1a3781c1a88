"""Internal values observed during a run (frozen, slotted dataclasses)."""

from __future__ import annotations

import bisect
import dataclasses
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class AnswerLabel(StrEnum):
    """What the load made of one answer (docs/load.md, "Answer quality"); one per request.

    When several apply, the first in this order wins: a cut stream that was also slow
    is ``truncated``, a canned answer that cites nothing is ``canned``.
    """

    TIMEOUT = "timeout"  # no answer within the client's timeout, or a gateway's 504/408
    TRUNCATED = "truncated"  # a 2xx answer that began and was cut (stream without its end)
    ERROR = "error"  # any other failure: no response, HTTP >= 400, an error in the stream
    CANNED = "canned"  # the fallback text no model wrote
    EMPTY = "empty"  # a 2xx answer with no text
    OFF_TOPIC = "off_topic"  # RAG: the answer cites none of the retrieved document ids
    OK = "ok"


ANSWERS_NAME = "answers.jsonl"  # the sampled answers of a run, one JSON object a line
# A backstop: the load's reservoirs keep far fewer (cap × slots × processes); a line with a
# made-up key beyond this many is dropped rather than grow the harness' memory.
MAX_ANSWER_SAMPLES = 50_000


@dataclass(frozen=True, slots=True)
class AnswerSample:
    """One sampled answer: its first bytes and its label (the load samples a few per slot).

    ``key`` is (load process, time slot, reservoir index): a later sample with the same
    key replaced this one in the load's reservoir, and replaces it here too.
    """

    t: float
    name: str
    label: str
    status: int
    text: str
    key: tuple[int, int, int]
    sources: tuple[str, ...] = ()  # RAG: the retrieved document ids
    cited: tuple[str, ...] = ()  # the ids the answer cites

    def to_json(self) -> dict[str, object]:
        return {
            "t": self.t,
            "name": self.name,
            "label": self.label,
            "status": self.status,
            "text": self.text,
            "key": list(self.key),
            "sources": list(self.sources),
            "cited": list(self.cited),
        }

    @classmethod
    def from_json(cls, obj: object) -> AnswerSample:
        """One line of ``answers.jsonl`` back; TypeError or ValueError for anything else."""
        if not isinstance(obj, dict):
            raise TypeError(f"not an answer sample: {type(obj).__name__}")
        try:
            key = tuple(int(k) for k in obj.get("key") or (0, 0, 0))
            return cls(
                t=float(obj["t"]),
                name=str(obj.get("name") or ""),
                label=str(obj.get("label") or ""),
                status=int(obj.get("status") or 0),
                text=str(obj.get("text") or ""),
                key=(key[0], key[1], key[2]),
                sources=tuple(str(x) for x in obj.get("sources") or ()),
                cited=tuple(str(x) for x in obj.get("cited") or ()),
            )
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"not an answer sample: {exc}") from exc


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One client request as the load generator saw it. Times in run seconds (t=0 after warm-up)."""

    t: float  # when it was sent
    duration: float  # end-to-end seconds
    ok: bool
    status: int = 0  # HTTP status; 0 = no response (connection error, timeout)
    name: str = ""  # endpoint or request name
    ttft: float | None = None  # time to first token (streams)
    itl: tuple[float, ...] = ()  # inter-token latencies (streams)
    tokens: int = 0
    degraded: bool = False
    reasons: tuple[str, ...] = ()
    model: str = ""
    error: str = ""
    task_id: str = ""  # agent tasks: the id the runtime gave it
    task_state: str = ""  # agent tasks: the last state seen (done, failed, lost, unfinished)
    quality: str = ""  # an AnswerLabel; "" for a request that is no answer (task.submit)
    # The W3C trace the request started (32 lower-case hex digits; "" when the run sent no
    # traceparent) and whether it was sampled: a sampled trace's spans join to this outcome.
    trace_id: str = ""
    trace_sampled: bool = False
    sample: AnswerSample | None = None  # only in transit: Observations keeps samples apart


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one series at one time (scraped metric, derived figure)."""

    t: float
    name: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class Observations:
    """Everything observed in a run, appended by observers, read by checks. Thread-safe appends."""

    requests: list[RequestRecord] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    # Sampled answers by (process, slot, index): bounded by the load's reservoirs.
    answers: dict[tuple[int, int, int], AnswerSample] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_requests(self, records: Iterable[RequestRecord]) -> None:
        with self._lock:
            for rec in records:
                if rec.sample is not None:
                    # The text goes to its reservoir slot; the record keeps its label only.
                    key = rec.sample.key
                    if key in self.answers or len(self.answers) < MAX_ANSWER_SAMPLES:
                        self.answers[key] = rec.sample
                    rec = dataclasses.replace(rec, sample=None)  # noqa: PLW2901
                # Records usually arrive in order; insort keeps windows cheap to slice.
                if self.requests and rec.t < self.requests[-1].t:
                    bisect.insort(self.requests, rec, key=lambda r: r.t)
                else:
                    self.requests.append(rec)

    def answer_samples(self) -> list[AnswerSample]:
        """The sampled answers, oldest first."""
        with self._lock:
            return sorted(self.answers.values(), key=lambda a: (a.t, a.key))

    def add_samples(self, samples: Iterable[Sample]) -> None:
        with self._lock:
            self.samples.extend(samples)

    def requests_between(self, start: float, end: float) -> list[RequestRecord]:
        with self._lock:
            lo = bisect.bisect_left(self.requests, start, key=lambda r: r.t)
            hi = bisect.bisect_left(self.requests, end, key=lambda r: r.t)
            return self.requests[lo:hi]

    def samples_between(
        self, name: str, start: float, end: float, *, labels: dict[str, str] | None = None
    ) -> list[Sample]:
        want = set((labels or {}).items())
        with self._lock:
            return [
                s
                for s in self.samples
                if s.name == name and start <= s.t < end and want <= set(s.labels)
            ]


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest observed value with at least p% at or below it.

    Exact (no buckets, no interpolation): the result is always a latency that
    some request really had.
    """
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def metric_values(records: Iterable[RequestRecord], metric: str) -> list[float]:
    """The latency values one metric draws from a set of records (ITL: every gap)."""
    if metric == "e2e":
        return [r.duration for r in records]
    if metric == "ttft":
        return [r.ttft for r in records if r.ttft is not None]
    if metric == "itl":
        return [x for r in records for x in r.itl]
    raise ValueError(f"unknown latency metric {metric!r}")


@dataclass(frozen=True, slots=True)
class Bin:
    start: float
    records: tuple[RequestRecord, ...]


def bins(
    records: Sequence[RequestRecord], *, interval: float, start: float, end: float
) -> list[Bin]:
    """Records grouped into [start + k·interval, …) bins; empty bins included."""
    n = max(0, math.ceil((end - start) / interval - 1e-9))
    groups: list[list[RequestRecord]] = [[] for _ in range(n)]
    for r in records:
        k = math.floor((r.t - start) / interval)
        if 0 <= k < n:
            groups[k].append(r)
    return [Bin(round(start + k * interval, 6), tuple(g)) for k, g in enumerate(groups)]

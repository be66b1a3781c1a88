"""Answer quality on the load's side: what an answer says, its label, and which to quote.

Pure functions and one small class, imported by the locustfile (in the Locust child)
and by the tests; nothing here does I/O. docs/load.md ("Answer quality") defines the
labels; :class:`faultday.core.records.AnswerLabel` is their one spelling.
"""

from __future__ import annotations

import bisect
import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from faultday.core.records import AnswerLabel
from faultday_wire.answers import DEFAULT_CANNED_ANSWER, cited

# A gateway that gave up on its own deadline answers with one of these.
TIMEOUT_STATUSES = frozenset({408, 504})
# How much of an answer the load keeps while reading it (the quoted part is shorter still).
READ_LIMIT = 16_384


@dataclass(frozen=True, slots=True)
class Answer:
    """What one response said, as far as labelling needs it."""

    status: int  # HTTP status; 0 = no response
    text: str | None = None  # the answer's text; None = the response carries none
    error: str = ""  # transport, read or in-stream error
    timed_out: bool = False  # the client's timeout fired before an answer began
    cut: bool = False  # a 2xx answer began and ended early (a stream without its end)
    canned: bool = False  # the service marked it its fallback text
    sources: tuple[str, ...] | None = None  # RAG: the retrieved ids; None = not judged


# One return per label, in the order of AnswerLabel: clearer than a table of predicates.
def label(answer: Answer, canned_texts: Iterable[str] = ()) -> AnswerLabel:  # noqa: PLR0911
    """The one label of an answer (the order of :class:`AnswerLabel` breaks ties)."""
    ok_status = 200 <= answer.status < 300
    if answer.timed_out or answer.status in TIMEOUT_STATUSES:
        return AnswerLabel.TRUNCATED if ok_status and answer.cut else AnswerLabel.TIMEOUT
    if ok_status and answer.cut:
        return AnswerLabel.TRUNCATED
    if not ok_status or answer.error:
        return AnswerLabel.ERROR
    text = answer.text or ""
    if answer.canned or is_canned(text, canned_texts):
        return AnswerLabel.CANNED
    if not text.strip():
        return AnswerLabel.EMPTY
    if answer.sources is not None and not set(cited(text)) & set(answer.sources):
        return AnswerLabel.OFF_TOPIC
    return AnswerLabel.OK


def _norm(text: str) -> str:
    return " ".join(text.split())


def is_canned(text: str, canned_texts: Iterable[str] = ()) -> bool:
    """The text is a known fallback text (whitespace aside), the reference agent's included."""
    t = _norm(text)
    return bool(t) and any(t == _norm(c) for c in (DEFAULT_CANNED_ANSWER, *canned_texts))


def first_bytes(text: str, limit: int) -> str:
    """At most ``limit`` bytes of UTF-8 from the start of ``text``, never half a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


def answer_text(payload: object) -> str | None:
    """The answer in a JSON body: the agent's ``answer``, an OpenAI chat message or
    completion text, a task's ``answer``; None when the body holds no answer."""
    if not isinstance(payload, Mapping):
        return None
    if isinstance(payload.get("answer"), str):
        return str(payload["answer"])
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    first = choices[0]
    message = first.get("message")
    if isinstance(message, Mapping):
        if message.get("tool_calls"):
            return json.dumps(message["tool_calls"], separators=(",", ":"))
        content = message.get("content")
        return content if isinstance(content, str) else ""
    text = first.get("text")
    return text if isinstance(text, str) else None


def sources_of(payload: object) -> tuple[str, ...] | None:
    """The retrieved document ids a RAG answer reports (``sources``); None without them."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("sources"), list):
        return None
    return tuple(str(s) for s in payload["sources"])


def chunk_text(obj: object) -> str:
    """The text one OpenAI stream chunk adds (content, completion text or tool-call pieces)."""
    if not isinstance(obj, Mapping):
        return ""
    out = []
    for choice in obj.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        delta = choice.get("delta")
        delta = delta if isinstance(delta, Mapping) else {}
        for piece in (delta.get("content"), choice.get("text")):
            if isinstance(piece, str):
                out.append(piece)
        for call in delta.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
                out.append(fn["arguments"])
    return "".join(out)


def stream_finished(obj: object) -> bool:
    """A chunk that ends a choice (its ``finish_reason`` is set)."""
    if not isinstance(obj, Mapping):
        return False
    return any(isinstance(c, Mapping) and c.get("finish_reason") for c in obj.get("choices") or ())


class Reservoir:
    """Which answers to quote: per time slot, every answer up to ``cap``, then reservoir
    sampling (Vitter's algorithm R), so each answer of a slot is equally likely to stay.

    It keeps only a count per slot; the harness keeps the texts, each in the index
    :meth:`offer` returned (a later answer given the same index replaces it).
    """

    def __init__(self, *, cap: int, edges: Iterable[float], seed: int) -> None:
        self.cap = cap
        self.edges = sorted(set(edges))
        self.seen: dict[int, int] = {}
        self._rng = random.Random(seed)  # noqa: S311 - a fair sample, not a secret

    def slot(self, t: float) -> int:
        """0 before the first edge (warm-up), k from the k-th edge on."""
        return bisect.bisect_right(self.edges, t)

    def offer(self, t: float) -> tuple[int, int] | None:
        """(slot, index) where this answer's text goes, or None when it is not kept."""
        if self.cap <= 0:
            return None
        slot = self.slot(t)
        n = self.seen.get(slot, 0) + 1
        self.seen[slot] = n
        if n <= self.cap:
            return slot, n - 1
        j = self._rng.randrange(n)
        return (slot, j) if j < self.cap else None

"""The shipped corpus and golden retrieval set, and the collection swaps of vector_degrade.

The served name (``docs``) is an alias; the seeded data lives in ``docs__live``.
Degrading points the alias at another collection, which is exactly what an
operator's botched reindex does on a real Qdrant:

* ``empty``: a collection with the same schema and no points;
* ``stale``: the index as first built (documents added later are missing,
  some texts are outdated);
* ``shuffled``: every vector paired with another document's payload, so
  results look plausible but are wrong (recall near zero, no error anywhere).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from faultday_refstack.vectordb.engine import Store
from faultday_refstack.vectordb.wire import ApiError

log = logging.getLogger(__name__)

DATA_DIR = Path(__file__).parent / "data"
MODES = ("normal", "empty", "stale", "shuffled")

Embed = Callable[[list[str]], npt.NDArray[np.float32]]


@dataclass(frozen=True, slots=True)
class Doc:
    id: int
    doc_id: str
    topic: str
    title: str
    text: str
    version: int
    stale_text: str | None

    def payload(self, *, text: str | None = None) -> dict[str, Any]:
        return {
            "doc_id": self.doc_id,
            "topic": self.topic,
            "title": self.title,
            "text": text or self.text,
            "version": self.version,
        }


@dataclass(frozen=True, slots=True)
class GoldenQuery:
    query: str
    expected: tuple[str, ...]


def load_corpus(path: Path = DATA_DIR / "corpus.jsonl") -> list[Doc]:
    return [Doc(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def load_golden(path: Path = DATA_DIR / "golden.jsonl") -> list[GoldenQuery]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            raw = json.loads(line)
            out.append(GoldenQuery(raw["query"], tuple(raw["expected"])))
    return out


def doc_text(d: Doc) -> str:
    return f"{d.title}. {d.text}"


class Seeder:
    """Seeds the served collection and swaps what its alias points at."""

    def __init__(self, store: Store, *, alias: str, embed: Embed, dim: int) -> None:
        self.store = store
        self.alias = alias
        self.embed = embed
        self.dim = dim
        self.corpus = load_corpus()
        self.golden = load_golden()
        self.mode = "normal"
        self.ready = False
        self._lock = threading.Lock()

    def _name(self, mode: str) -> str:
        return f"{self.alias}__{'live' if mode == 'normal' else mode}"

    def seed(self) -> None:
        """Create ``<alias>__live`` with the corpus and point the alias at it."""
        live = self._name("normal")
        self.store.create(live, size=self.dim, distance="Cosine")
        vecs = self.embed([doc_text(d) for d in self.corpus])
        self.store.upsert(
            live, [(d.id, v.tolist(), d.payload()) for d, v in zip(self.corpus, vecs, strict=True)]
        )
        self.store.set_alias(self.alias, live)
        self.ready = True
        log.info("seeded %s with %d documents as %r", live, len(self.corpus), self.alias)

    def _build(self, mode: str) -> str:
        name = self._name(mode)
        if self.store.exists(name):
            return name
        self.store.create(name, size=self.dim, distance="Cosine")
        if mode == "stale":
            old = [d for d in self.corpus if d.version == 1]
            texts = [f"{d.title}. {d.stale_text or d.text}" for d in old]
            vecs = self.embed(texts)
            pts = [
                (d.id, v.tolist(), d.payload(text=d.stale_text))
                for d, v in zip(old, vecs, strict=True)
            ]
            self.store.upsert(name, pts)
        elif mode == "shuffled":
            vecs = self.embed([doc_text(d) for d in self.corpus])
            n = len(self.corpus)
            # Pair document i's payload with the vector of document i + n/2: deterministic.
            pts = [
                (d.id, vecs[(i + n // 2) % n].tolist(), d.payload())
                for i, d in enumerate(self.corpus)
            ]
            self.store.upsert(name, pts)
        return name

    def degrade(self, mode: str) -> None:
        if mode not in MODES:
            raise ApiError(400, f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        with self._lock:
            target = self._build(mode)
            self.store.set_alias(self.alias, target)
            self.mode = mode
        log.warning("alias %r now serves %s (%s)", self.alias, target, mode)

    def state(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "serving": self.store.aliases.get(self.alias),
            "mode": self.mode,
            "modes": list(MODES),
            "documents": len(self.corpus),
        }

    def golden_json(self) -> list[dict[str, Any]]:
        return [{"query": g.query, "expected": list(g.expected)} for g in self.golden]

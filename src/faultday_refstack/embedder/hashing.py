"""A deterministic hash embedder: words and word pairs hashed into signed buckets.

No model download, identical on every machine, and texts that share words land
close together, so retrieval over the shipped corpus behaves like a (crude)
real embedder: recall checks on the golden set are meaningful.
"""

from __future__ import annotations

import hashlib
import itertools
import re

import numpy as np
import numpy.typing as npt

DIM = 384
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "how",
        "i",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "that",
        "the",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
        "does",
        "do",
        "can",
        "my",
        "our",
        "your",
    ]
)


def _bucket(token: str, dim: int) -> tuple[int, float]:
    h = hashlib.blake2b(token.encode(), digest_size=8).digest()
    n = int.from_bytes(h, "little")
    return n % dim, (1.0 if (n >> 63) & 1 else -1.0)


def embed_one(text: str, dim: int = DIM) -> npt.NDArray[np.float32]:
    """L2-normalised vector of ``text``; the zero-text vector is a fixed unit vector."""
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOP]
    v = np.zeros(dim, dtype=np.float32)
    for w in words:
        i, s = _bucket(w, dim)
        v[i] += s
        if len(w) > 4:  # a crude stem so "restarts" meets "restart"
            i, s = _bucket(w[:5], dim)
            v[i] += 0.5 * s
    for a, b in itertools.pairwise(words):
        i, s = _bucket(f"{a} {b}", dim)
        v[i] += 0.5 * s
    norm = float(np.linalg.norm(v))
    if norm == 0.0:
        v[0] = 1.0
        return v
    return v / norm


def embed(texts: list[str], dim: int = DIM) -> npt.NDArray[np.float32]:
    """One row per text."""
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    return np.stack([embed_one(t, dim) for t in texts])

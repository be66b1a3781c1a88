"""The canary split: a deterministic share of chat requests goes to a second model version.

A request is routed by a seeded hash of its key (the request's trace id, or
its session id), so the same key always lands on the same side for a given
share and seed: a split is reproducible and a session can be kept sticky.
The share is runtime state, set through ``POST /admin/canary`` by a rollout.
"""

from __future__ import annotations

import hashlib

from faultday_wire.llm import Canary, CanaryKey

_SCALE = float(1 << 64)


def draw(key: str, *, seed: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, key)."""
    digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


class CanarySplit:
    """The current canary share and the routing decision; one per runtime."""

    def __init__(self, cfg: Canary) -> None:
        self.cfg = cfg
        self.share = cfg.share

    def set_share(self, share: float) -> float:
        """Set the share (0 stops the canary); returns the previous one."""
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share must be in [0, 1], got {share!r}")
        previous, self.share = self.share, share
        return previous

    def key(self, *, session_id: str, request_id: str) -> str:
        if self.cfg.key == CanaryKey.SESSION or not request_id:
            return session_id
        return request_id

    def routes(self, key: str) -> bool:
        """True when this key goes to the canary at the current share."""
        if self.share <= 0.0:
            return False
        return draw(key, seed=self.cfg.seed) < self.share

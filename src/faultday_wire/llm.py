"""The agent's models (``models:`` in ``stack/agent.yaml``), one model for both sides.

The agent calls its LLMs with these settings; ``faultday preflight`` reads the
same ``max_tokens`` to size the KV-cache probe, so it reads them with this model
too (:mod:`faultday_wire.policy` holds the resilience policies).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from faultday_wire.policy import StrictModel, bounded

MAX_TOKENS = 4096
Tokens = Annotated[int, bounded(whole=True, low=1, high=MAX_TOKENS)]


class CanaryKey(StrEnum):
    REQUEST = "request"  # each request draws on its own (trace id): the share is of requests
    SESSION = "session"  # a conversation stays on one version: the share is of sessions


class Canary(StrictModel):
    """A second model version behind ``--llm-canary`` that takes a share of chat traffic."""

    model: str = Field(description="the model name sent to llm-canary")
    share: Annotated[float, bounded(whole=False, low=0, high=1)] = Field(
        default=0.0, description="share at start; admin API sets it"
    )
    max_tokens: Tokens | None = Field(
        default=None, description="the version's own budget; default models'"
    )
    key: CanaryKey = Field(default=CanaryKey.REQUEST, description="what the split hashes")
    seed: int = Field(default=0, description="seeds the hash, so a split is reproducible")


class Models(StrictModel):
    primary: str
    backup: str
    max_tokens: Tokens = 128
    canary: Canary | None = None

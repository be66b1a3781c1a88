"""Model rollouts: send a share of the agent's chat traffic to a canary model version.

A rollout is not a fault of the stack, but it is started and stopped like one:
``inject`` sets the canary share through the agent's admin API
(``POST /admin/canary {share}``), and the revert sets back the share read in
``prepare`` (0 when no canary ran), so the window of the "fault" is the canary
phase. The revert is one idempotent POST; an agent that is not listening has
lost the runtime share with its process and starts from its configured one.
"""

from __future__ import annotations

import logging
from typing import ClassVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from faultday.core.targets import Revert, Target
from faultday.errors import InjectionError, RevertError
from faultday.injectors.base import FaultContext, Injector, RevertData
from faultday_wire.admin import CanaryShare

log = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 5.0


class ModelRolloutParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    share: float = Field(gt=0, le=1, description="share of chat requests for the canary, e.g. 0.05")


def _base(target: Target) -> str:
    base = target.admin_url or target.url
    if not base:
        raise InjectionError(f"{target.name}: no admin_url or url for the agent runtime")
    if "://" not in base:
        base = "http://" + base
    return base.rstrip("/")


def _current_share(base: str, *, target: str) -> float:
    try:
        resp = httpx.get(f"{base}/admin/canary", timeout=ADMIN_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise InjectionError(f"{target}: agent admin API unreachable at {base}: {exc}") from exc
    if resp.status_code != 200:
        raise InjectionError(
            f"{target}: {base}/admin/canary answered {resp.status_code} "
            "(an agent without the canary admin API?)"
        )
    state = resp.json()
    if not state.get("configured"):
        raise InjectionError(
            f"{target}: the agent has no canary configured "
            "(models.canary in its agent.yaml and --llm-canary in the stack profile)"
        )
    return float(state.get("share") or 0.0)


def set_share(base: str, share: float, *, target: str) -> None:
    try:
        body = CanaryShare(share=share).model_dump()  # the agent's own body model
        resp = httpx.post(f"{base}/admin/canary", json=body, timeout=ADMIN_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise InjectionError(f"{target}: could not set the canary share: {exc}") from exc
    if resp.status_code != 200:
        raise InjectionError(
            f"{target}: POST {base}/admin/canary answered {resp.status_code}: {resp.text[:300]}"
        )


class ShareData(RevertData):
    """The agent's admin API and the canary share to put back."""

    base: str
    previous: float = 0.0


class ModelRollout(Injector[ModelRolloutParams, ShareData]):
    """A canary rollout: ``share`` of chat requests go to the new model version."""

    name = "model_rollout"
    summary = "canary rollout: a share of chat traffic to a new model version (agent admin API)"
    Params = ModelRolloutParams
    Data = ShareData
    component_types: ClassVar[frozenset[str] | None] = frozenset({"agent"})

    def prepare(
        self, ctx: FaultContext, target: Target, params: ModelRolloutParams, *, fault: str
    ) -> Revert:
        base = _base(target)
        data = ShareData(base=base, previous=_current_share(base, target=target.name))
        return self.record(target, fault=fault, action="set_canary_share", data=data)

    def inject(
        self, ctx: FaultContext, target: Target, params: ModelRolloutParams, revert: Revert
    ) -> None:
        set_share(self.data(revert).base, params.share, target=target.name)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        d = self.data(revert)
        base, share = d.base, d.previous
        try:
            set_share(base, share, target=revert.target)
        except InjectionError as exc:
            if isinstance(exc.__cause__, httpx.ConnectError):
                log.info("%s: agent not listening; its canary share went with it", revert.target)
                return
            raise RevertError(str(exc)) from exc

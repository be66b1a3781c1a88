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
from faultday.injectors.base import FaultContext, Injector

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
        resp = httpx.post(f"{base}/admin/canary", json={"share": share}, timeout=ADMIN_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise InjectionError(f"{target}: could not set the canary share: {exc}") from exc
    if resp.status_code != 200:
        raise InjectionError(
            f"{target}: POST {base}/admin/canary answered {resp.status_code}: {resp.text[:300]}"
        )


class ModelRollout(Injector):
    """A canary rollout: ``share`` of chat requests go to the new model version."""

    name = "model_rollout"
    summary = "canary rollout: a share of chat traffic to a new model version (agent admin API)"
    Params = ModelRolloutParams
    component_types: ClassVar[frozenset[str] | None] = frozenset({"agent"})

    def prepare(
        self, ctx: FaultContext, target: Target, params: BaseModel, *, fault: str
    ) -> Revert:
        base = _base(target)
        return Revert(
            injector=self.name,
            fault=fault,
            target=target.name,
            action="set_canary_share",
            data={"base": base, "previous": _current_share(base, target=target.name)},
        )

    def inject(self, ctx: FaultContext, target: Target, params: BaseModel, revert: Revert) -> None:
        assert isinstance(params, ModelRolloutParams)
        set_share(str(revert.data["base"]), params.share, target=target.name)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        base = str(revert.data["base"])
        previous = revert.data.get("previous")
        share = float(previous) if isinstance(previous, int | float) else 0.0
        try:
            set_share(base, share, target=revert.target)
        except InjectionError as exc:
            if isinstance(exc.__cause__, httpx.ConnectError):
                log.info("%s: agent not listening; its canary share went with it", revert.target)
                return
            raise RevertError(str(exc)) from exc

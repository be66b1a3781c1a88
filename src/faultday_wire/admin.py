"""Bodies of the reference stack's fault-admin routes, as both sides read and write them.

The harness's injectors send these; the services validate them. One model per
route, so a field renamed on one side fails the other side's tests instead of
a game day (an unknown key is refused: ``extra="forbid"``).

* simulator: ``POST /admin/faults`` → :class:`FaultSpec`; ``DELETE /admin/faults/{id}``
* tool server: ``PUT /admin/faults/{id}`` → :class:`ToolFault`; ``DELETE`` the same path
* agent: ``POST /admin/canary`` → :class:`CanaryShare`
* simulator: ``PUT /admin/leak`` → :class:`LeakSpec`; ``DELETE /admin/leak`` releases it
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

FAULTS_PATH: Final = "/admin/faults"
CANARY_PATH: Final = "/admin/canary"
LEAK_PATH: Final = "/admin/leak"
# The most a leak may hold on any machine; the simulator also keeps it within the
# memory its machine can spare (``llmsim.faults.leak_ceiling``).
LEAK_MAX_MIB: Final = 65536


class FaultKind(StrEnum):
    """GPU faults the simulator can be told to suffer (``llmsim.faults`` says what each does)."""

    XID = "xid"
    OOM = "oom"
    HANG = "hang"
    THROTTLE = "throttle"
    KV_SHRINK = "kv_shrink"
    ECC_SBE = "ecc_sbe"


class FaultSpec(BaseModel):
    """Body of the simulator's ``POST /admin/faults``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FaultKind
    # Strict: a boolean is not a number (``true`` would be Xid 1 or a factor of 1).
    xid: int = Field(default=79, ge=1, le=999, strict=True)
    # Bounded and finite: a step already scheduled at x1e300 would outlast clearing the fault.
    factor: float = Field(default=2.0, gt=0, le=1000, allow_inf_nan=False, strict=True)
    id: str = Field(default="", max_length=64, pattern=r"^[A-Za-z0-9_.:-]*$")

    @model_validator(mode="after")
    def _check_factor(self) -> FaultSpec:
        if self.kind == FaultKind.THROTTLE and self.factor < 1:
            raise ValueError("throttle factor must be >= 1 (it slows steps down)")
        if self.kind == FaultKind.KV_SHRINK and self.factor > 1:
            raise ValueError("kv_shrink factor must be in (0, 1]")
        return self


class ToolFault(BaseModel):
    """Body of the tool server's ``PUT /admin/faults/{id}``; several combine (min, sum)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: list[str] | None = Field(default=None, description="tools affected; null = all")
    concurrency: int | None = Field(default=None, ge=0, description="cap on calls in flight")
    queue: int | None = Field(default=None, ge=0, description="cap on calls waiting")
    latency_s: float = Field(default=0.0, ge=0.0, le=600.0)
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)

    def applies(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools


class CanaryShare(BaseModel):
    """Body of the agent's ``POST /admin/canary``: the share of chat requests for the canary."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    share: float = Field(ge=0, le=1, description="share of chat requests for the canary")


class LeakSpec(BaseModel):
    """Body of the simulator's ``PUT /admin/leak``: allocate and keep memory at a steady rate.

    One leak per process: a second PUT replaces the rate and the maximum and keeps
    what is held, less anything above the new maximum (given back at once). Strict
    types: a boolean or a string is not a number, a float is not an integer.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    rate_mib_per_min: float = Field(gt=0, le=LEAK_MAX_MIB, description="MiB a real minute")
    max_mib: int = Field(
        default=512,
        ge=1,
        le=LEAK_MAX_MIB,
        description="stop growing at this much; at most what the machine can spare",
    )


class LeakState(BaseModel):
    """What ``GET``/``PUT``/``DELETE /admin/leak`` answer: the memory held now."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    active: bool
    held_mib: int
    rate_mib_per_min: float = 0.0
    max_mib: int = 0
    released_mib: int = 0  # DELETE, or a PUT below what is held: what was just given back

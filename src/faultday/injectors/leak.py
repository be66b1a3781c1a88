"""A slow memory leak: the target allocates and keeps host memory at a steady rate.

``memory_leak: {target: llm-primary, rate: 60MiB/min}`` tells the simulator's
admin API (``PUT /admin/leak``, body :class:`faultday_wire.admin.LeakSpec`) to
allocate and keep memory at that rate, up to ``max``; the revert
(``DELETE /admin/leak``) unmaps all of it. It is the fault a soak's drift check
must catch (docs/soak.md). The rate is per real (wall-clock) minute, like the
drift check's slopes, whatever ``--time-scale`` is.
"""

from __future__ import annotations

import logging
import re
from typing import ClassVar

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from faultday.core.targets import Revert, Target
from faultday.errors import InjectionError, RevertError
from faultday.injectors.base import FaultContext, Injector, RevertData
from faultday_wire.admin import LEAK_PATH, LeakSpec

log = logging.getLogger(__name__)

LLMSIM = "llmsim"
ADMIN_TIMEOUT_S = 5.0
_MIB = {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}
_PER_MIN = {"s": 1 / 60, "min": 1.0, "h": 60.0}
_RATE = re.compile(r"^\s*(\d+\.?\d*|\.\d+)\s*(KiB|MiB|GiB)\s*/\s*(s|min|h)\s*$")
_SIZE = re.compile(r"^\s*(\d+)\s*(MiB|GiB)\s*$")


def rate_mib_per_min(value: str | float) -> float:
    """``60MiB/min``, ``1MiB/s``, ``2GiB/h`` or a number of MiB a minute → MiB a minute."""
    if isinstance(value, int | float):
        return float(value)
    m = _RATE.match(value)
    if m is None:
        raise ValueError(f"rate {value!r} is not <number><KiB|MiB|GiB>/<s|min|h>, e.g. 60MiB/min")
    number, unit, per = m.groups()
    return float(number) * _MIB[unit] / _PER_MIN[per]


class LeakParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # Strict, as the simulator's body is: `true` is not a rate of 1.
    rate: StrictStr | StrictFloat = Field(
        description="memory kept per real minute: 60MiB/min, 1MiB/s"
    )
    max_: StrictStr | StrictInt = Field(
        default="512MiB", alias="max", description="stop growing at this much: 512MiB, 1GiB"
    )

    @model_validator(mode="after")
    def _fits(self) -> LeakParams:
        try:
            self.spec()  # the simulator's own body model: what it would refuse fails here
        except ValidationError as exc:
            errors = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"the simulator would refuse this leak ({errors})") from exc
        return self

    def spec(self) -> LeakSpec:
        return LeakSpec(rate_mib_per_min=rate_mib_per_min(self.rate), max_mib=max_mib(self.max_))


def max_mib(value: str | int) -> int:
    if isinstance(value, int):
        return value
    m = _SIZE.match(value)
    if m is None:
        raise ValueError(f"max {value!r} is not <whole number><MiB|GiB>, e.g. 512MiB")
    return int(m.group(1)) * (1024 if m.group(2) == "GiB" else 1)


class LeakData(RevertData):
    admin: str  # the simulator's base URL: DELETE {admin}/admin/leak releases it


def _admin(target: Target) -> str:
    base = target.admin_url or target.url
    if not base:
        raise InjectionError(f"{target.name}: no admin_url or url to reach its leak API")
    return (base if "://" in base else "http://" + base).rstrip("/")


class MemoryLeak(Injector[LeakParams, LeakData]):
    """The component allocates and keeps memory at a steady rate; the revert frees it."""

    name: ClassVar[str] = "memory_leak"
    summary: ClassVar[str] = "a slow memory leak: N MiB a minute kept until the revert"
    Params = LeakParams
    Data = LeakData
    component_types: ClassVar[frozenset[str] | None] = frozenset({LLMSIM})

    def prepare(
        self, ctx: FaultContext, target: Target, params: LeakParams, *, fault: str
    ) -> Revert:
        if target.component_type != LLMSIM:
            raise InjectionError(
                f"{target.name}: component type {target.component_type!r} has no leak API; "
                f"supported: {LLMSIM}"
            )
        return self.record(
            target, fault=fault, action="release", data=LeakData(admin=_admin(target))
        )

    def inject(self, ctx: FaultContext, target: Target, params: LeakParams, revert: Revert) -> None:
        url = self.data(revert).admin + LEAK_PATH
        spec = params.spec()
        try:
            resp = httpx.put(url, json=spec.model_dump(mode="json"), timeout=ADMIN_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise InjectionError(f"{target.name}: leak API unreachable at {url}: {exc}") from exc
        if resp.status_code != 200:
            raise InjectionError(
                f"{target.name}: {url} answered {resp.status_code}: {resp.text[:300]}"
            )
        log.info(
            "%s: leaking %.3g MiB/min up to %d MiB",
            target.name,
            spec.rate_mib_per_min,
            spec.max_mib,
        )

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        url = self.data(revert).admin + LEAK_PATH
        try:
            resp = httpx.delete(url, timeout=ADMIN_TIMEOUT_S)
        except httpx.ConnectError:
            log.info("%s: not listening; its leaked memory went with the process", revert.target)
            return
        except httpx.HTTPError as exc:
            raise RevertError(f"{revert.target}: could not release the leak: {exc}") from exc
        if resp.status_code != 200:
            raise RevertError(f"{revert.target}: releasing the leak answered {resp.status_code}")
        log.info("%s: leak released (%s MiB)", revert.target, resp.json().get("released_mib"))

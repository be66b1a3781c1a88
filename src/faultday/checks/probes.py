"""Checks that probe the live stack when the run is judged."""

from __future__ import annotations

from typing import ClassVar

import httpx
from pydantic import Field

from faultday.checks.base import Check, CheckContext, CheckParams
from faultday.core.windows import CheckResult, Verdict, Window


class HealthParams(CheckParams):
    target: str = Field(description="a component")
    path: str = Field(default="/health", description="HTTP path on the component")
    status: int = Field(default=200, ge=100, le=599, description="the status it must answer")
    timeout: float = Field(default=2.0, gt=0, le=60, description="seconds")


class Health(Check[HealthParams]):
    """An endpoint of a component answers the expected status when the run is judged."""

    name: ClassVar[str] = "health"
    summary: ClassVar[str] = "a component's HTTP endpoint answers the expected status"
    Params = HealthParams
    live: ClassVar[bool] = True

    def evaluate(self, ctx: CheckContext, params: HealthParams, window: Window) -> CheckResult:
        target = ctx.target(params.target)
        base = target.url if target.url.startswith("http") else f"http://{target.url}"
        url = base.rstrip("/") + params.path
        expected = f"{params.path} → {params.status}"
        try:
            status = httpx.get(url, timeout=params.timeout).status_code
            observed = f"{status}"
        except httpx.HTTPError as exc:
            status, observed = 0, f"no answer ({type(exc).__name__})"
        verdict = Verdict.PASSED if status == params.status else Verdict.FAILED
        return CheckResult(
            self.name, f"health {params.target}", window.label, verdict, expected, observed, n=1
        )

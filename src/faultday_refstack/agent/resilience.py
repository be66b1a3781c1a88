"""Resilience around every dependency call: deadline, timeout, breaker, retries, budget.

Retries use stamina (exponential backoff with jitter, only on retryable
errors); breakers are purgatory's async circuit breakers, one per dependency;
the retry budget is a token bucket so that retries stay a bounded fraction of
traffic and cannot turn an outage into a retry storm.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import stamina
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue
from purgatory import AsyncCircuitBreakerFactory
from purgatory.domain.model import OpenedState

from faultday_refstack.agent.obs import Metrics
from faultday_refstack.errors import RefstackError
from faultday_wire.metrics import (
    BREAKER_CLOSED,
    BREAKER_HALF_OPEN,
    BREAKER_OPEN,
    BREAKER_STATES,
)
from faultday_wire.policy import Policy

T = TypeVar("T")

# The stack's component behind each dependency (its OTEL_SERVICE_NAME there): peer.service.
PEER_SERVICE = {"embedder": "triton", "vector": "qdrant"}


class DependencyError(RefstackError):
    """A dependency failed after the policy ran its course (retries, breaker)."""

    def __init__(self, dependency: str, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{dependency}: {reason}")
        self.dependency = dependency
        self.reason = reason
        self.retry_after = retry_after


class Retryable(RefstackError):
    """An attempt failed in a way worth retrying (5xx, 429, timeout, connection)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Permanent(RefstackError):
    """An attempt failed in a way retrying cannot fix (4xx, bad data, denied)."""


class Deadline:
    """An absolute point in time that bounds a request or a task, nested calls included."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def cap(self, seconds: float) -> float:
        return min(seconds, self.remaining())

    def expired(self) -> bool:
        return self.remaining() <= 0


class RetryBudget:
    """Token bucket: each request deposits ``ratio`` tokens, each retry spends one."""

    def __init__(self, *, ratio: float, min_per_s: float, cap: float = 100.0) -> None:
        self.ratio = ratio
        self.min_per_s = min_per_s
        self.cap = cap
        self.tokens = max(min_per_s, 1.0)
        self._last = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.cap, self.tokens + (now - self._last) * self.min_per_s)
        self._last = now

    def deposit(self) -> None:
        self._refill()
        self.tokens = min(self.cap, self.tokens + self.ratio)

    def withdraw(self) -> bool:
        self._refill()
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass(frozen=True, slots=True)
class CallResult:
    attempts: int
    seconds: float


class Resilience:
    """One per runtime: the breakers, budgets and the call wrapper every dependency uses."""

    def __init__(self, policy: Policy, metrics: Metrics, tracer: Tracer) -> None:
        self.policy = policy
        self.metrics = metrics
        self.tracer = tracer
        b = policy.breakers
        self.breakers = AsyncCircuitBreakerFactory(
            default_threshold=b.threshold,
            default_ttl=b.reset_after,
            exclude=[Permanent],  # our own bad request says nothing about the dependency
        )
        self.breakers.add_listener(self._on_breaker_event)
        self.budgets: dict[str, RetryBudget] = {}
        self.states: dict[str, str] = {}

    def _on_breaker_event(self, name: str, event_name: str, event: object) -> None:
        if event_name == "state_changed":
            state = str(getattr(event, "state", BREAKER_CLOSED))
            self.states[name] = state
            self.metrics.breaker_state.labels(name).set(BREAKER_STATES.get(state, 0))
            self.metrics.breaker_transitions.labels(name, state).inc()

    def breaker_state(self, name: str) -> str:
        """closed, half-opened or opened (purgatory's names), as last reported."""
        return self.states.get(name, BREAKER_CLOSED)

    def _budget(self, dep: str) -> RetryBudget | None:
        r = self.policy.retries
        if r.budget_ratio is None:
            return None
        if dep not in self.budgets:
            self.budgets[dep] = RetryBudget(ratio=r.budget_ratio, min_per_s=r.budget_min_per_s)
        return self.budgets[dep]

    async def call(
        self,
        dep: str,
        fn: Callable[[float], Awaitable[T]],
        *,
        timeout: float,
        deadline: Deadline,
        op: str = "call",
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> T:
        """Run ``fn(attempt_timeout)`` under the policy; raise DependencyError when it gives up.

        Spans (docs/agent.md): ``{dep} {op}`` around the whole call, and under it one
        CLIENT span per attempt that reached the dependency (``fn`` runs inside it, so
        its outgoing request carries that span's ``traceparent``) or an ERROR span per
        attempt the breaker refused.
        """
        budget = self._budget(dep)
        if budget is not None:
            budget.deposit()
        r = self.policy.retries

        def should_retry(exc: Exception) -> bool | float:
            if not isinstance(exc, Retryable) or deadline.expired():
                return False
            if budget is not None and not budget.withdraw():
                self.metrics.retry_budget_exhausted.labels(dep).inc()
                return False
            if exc.retry_after is not None and exc.retry_after < deadline.remaining():
                return exc.retry_after
            return True

        peer = PEER_SERVICE.get(dep, dep)
        attrs: dict[str, AttributeValue] = {
            "faultday.dependency": dep,
            "faultday.op": op,
            "peer.service": peer,
            **(attributes or {}),
        }
        with self.tracer.start_as_current_span(
            f"{dep} {op}", attributes=attrs, record_exception=False, set_status_on_exception=False
        ) as span:
            attempts = 0
            gaps = _Gaps()
            try:
                async for attempt in stamina.retry_context(
                    on=should_retry,
                    attempts=r.attempts,
                    timeout=max(deadline.remaining(), 0.001),
                    wait_initial=r.backoff_initial,
                    wait_max=r.backoff_max,
                    wait_jitter=r.jitter,
                ):
                    with attempt:
                        attempts = attempt.num
                        if attempts > 1:
                            self.metrics.retries.labels(dep).inc()
                        result = await self._attempt(
                            dep,
                            fn,
                            timeout=timeout,
                            deadline=deadline,
                            span_attrs={
                                "peer.service": peer,
                                "retry.attempt": attempts,
                                "retry.backoff_s": gaps.slept(),
                                **(attributes or {}),
                            },
                            name=f"{dep} {op} attempt",
                            gaps=gaps,
                        )
                span.set_attributes(
                    {
                        "faultday.attempts": attempts,
                        "faultday.result": "ok",
                        "breaker.state": self.breaker_state(dep),
                    }
                )
                self.metrics.dep_calls.labels(dep, "ok").inc()
                return result
            except OpenedState as exc:
                self._fail(span, dep, "breaker_open", attempts, "circuit breaker open")
                raise DependencyError(dep, "circuit breaker open") from exc
            except (Retryable, Permanent) as exc:
                kind = "retryable" if isinstance(exc, Retryable) else "permanent"
                self._fail(span, dep, f"error_{kind}", attempts, str(exc))
                raise DependencyError(
                    dep, str(exc), retry_after=getattr(exc, "retry_after", None)
                ) from exc

    def _fail(self, span: Span, dep: str, result: str, attempts: int, message: str) -> None:
        self.metrics.dep_calls.labels(dep, result).inc()
        span.set_attributes(
            {
                "faultday.attempts": attempts,
                "faultday.result": result,
                "breaker.state": self.breaker_state(dep),
            }
        )
        span.set_status(Status(StatusCode.ERROR, message[:300]))

    async def _attempt(
        self,
        dep: str,
        fn: Callable[[float], Awaitable[T]],
        *,
        timeout: float,
        deadline: Deadline,
        span_attrs: dict[str, AttributeValue],
        name: str,
        gaps: _Gaps,
    ) -> T:
        try:
            return await self._attempt_in(
                dep, fn, timeout=timeout, deadline=deadline, span_attrs=span_attrs, name=name
            )
        finally:
            gaps.ended()

    async def _attempt_in(
        self,
        dep: str,
        fn: Callable[[float], Awaitable[T]],
        *,
        timeout: float,
        deadline: Deadline,
        span_attrs: dict[str, AttributeValue],
        name: str,
    ) -> T:
        budget_s = deadline.cap(timeout)
        if budget_s <= 0:
            raise Permanent("deadline exceeded before the call")
        if not self.policy.breakers.enabled:
            self.metrics.attempts.labels(dep).inc()
            return await self._traced(name, fn, budget_s, span_attrs)
        breaker = await self.breakers.get_breaker(dep)
        try:
            async with breaker:
                # purgatory publishes state changes only when the block exits, so a half-open
                # probe would show as open → closed; publish it while the probe is in flight.
                state = breaker.context.state
                if state == BREAKER_HALF_OPEN:
                    self._on_breaker_event(dep, "state_changed", breaker.context)
                # Counted only once the breaker let it through: a call that reached the dependency.
                self.metrics.attempts.labels(dep).inc()
                span_attrs["breaker.state"] = state
                return await self._traced(name, fn, budget_s, span_attrs)
        except OpenedState:
            # The refusal is a decision of ours, not a call: an INTERNAL span, in error.
            with self.tracer.start_as_current_span(
                f"{dep} breaker open",
                attributes={**span_attrs, "breaker.state": BREAKER_OPEN},
            ) as refused:
                refused.set_status(Status(StatusCode.ERROR, "circuit breaker open"))
            raise

    async def _traced(
        self,
        name: str,
        fn: Callable[[float], Awaitable[T]],
        seconds: float,
        attrs: dict[str, AttributeValue],
    ) -> T:
        with self.tracer.start_as_current_span(
            name,
            kind=SpanKind.CLIENT,
            attributes=attrs,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return await _timed(fn, seconds)
            except BaseException as exc:
                # Retryable/Permanent as the client mapped them; else a cancellation (the
                # request's hard stop) or a bug: the span says which, the caller decides.
                span.set_attribute("error.type", type(exc).__name__)
                span.set_status(Status(StatusCode.ERROR, str(exc)[:300] or type(exc).__name__))
                raise


class _Gaps:
    """The backoff stamina slept before each attempt, as it happened (jitter included)."""

    __slots__ = ("_last_end",)

    def __init__(self) -> None:
        self._last_end: float | None = None

    def slept(self) -> float:
        """Seconds since the last attempt ended (0 before the first)."""
        return 0.0 if self._last_end is None else round(time.monotonic() - self._last_end, 6)

    def ended(self) -> None:
        self._last_end = time.monotonic()


async def _timed(fn: Callable[[float], Awaitable[T]], seconds: float) -> T:
    try:
        async with asyncio.timeout(seconds):
            return await fn(seconds)
    except TimeoutError as exc:
        raise Retryable(f"timed out after {seconds:.3g}s") from exc

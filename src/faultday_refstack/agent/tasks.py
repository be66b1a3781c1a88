"""Agent tasks: a state machine checkpointed in Redis after every step.

plan (LLM tool calling, or the agent's playbook) → act (one tool call per
step) → answer. A planner agent splits a goal into subtasks with dependencies
on a priority queue; executors consume them; results travel as references.
No worker ever blocks on another task: a task whose inputs are not ready goes
back on the queue, and past ``timeouts.wait`` it runs its fallback instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from enum import StrEnum
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from faultday_refstack.agent.config import MAX_ARG_CHARS, MAX_STEPS, Name, Step, Text
from faultday_refstack.agent.deps import ToolCall
from faultday_refstack.agent.resilience import Deadline, DependencyError
from faultday_refstack.agent.runtime import Outcome, Runtime, Unavailable
from faultday_refstack.otel import PROPAGATOR, inject

log = logging.getLogger(__name__)

OPEN = "fd:tasks:open"
QUEUE = "fd:queue"
POLL_S = 0.1
# A parent that is not sampled: the SDK's default (parent-based) sampler records no child.
_UNSAMPLED = NonRecordingSpan(
    SpanContext(trace_id=1, span_id=1, is_remote=False, trace_flags=TraceFlags(TraceFlags.DEFAULT))
)
REQUEUE_S = 0.3


class TaskStatus(StrEnum):
    QUEUED = "queued"
    PLANNING = "planning"
    ACTING = "acting"
    WAITING = "waiting"
    ANSWERING = "answering"
    DONE = "done"
    FAILED = "failed"


class Observation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int
    tool: str
    ok: bool
    ref: str = ""  # the full result lives at this Redis key; the record keeps a summary
    summary: str = ""


class Task(BaseModel):
    """The checkpoint: everything needed to continue a task in another process."""

    model_config = ConfigDict(extra="forbid")

    id: str
    agent: str
    goal: str
    idempotency_key: str
    status: TaskStatus = TaskStatus.QUEUED
    plan: list[Step] | None = None
    step: int = 0
    observations: list[Observation] = Field(default_factory=list)
    answer: str = ""
    model: str = ""
    degraded_reasons: list[str] = Field(default_factory=list)
    error: str = ""
    priority: int = 5
    parent: str = ""
    children: list[str] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)
    split: list[Subtask] | None = None  # a scripted split, for a planner
    created: float = Field(default_factory=time.time)
    started: float | None = None
    waiting_since: float | None = None
    runs: int = 0
    checkpoints: int = 0
    trace_id: str = ""
    traceparent: str = ""  # the submitting request's span: the task's spans join its trace

    @property
    def finished(self) -> bool:
        return self.status in (TaskStatus.DONE, TaskStatus.FAILED)


class Subtask(BaseModel):
    """One subtask of a scripted split (``depends_on``: indexes of its siblings)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    goal: Text = Field(min_length=1, max_length=2000)
    agent: Name = "report"
    priority: int = Field(default=5, ge=0, le=9)
    depends_on: list[int] = Field(default_factory=list, max_length=4)


class TaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    agent: Name
    goal: Text = Field(min_length=1, max_length=4000)
    idempotency_key: Text = Field(min_length=1, max_length=200)
    priority: int = Field(default=5, ge=0, le=9)
    steps: list[Step] | None = Field(
        default=None,
        max_length=MAX_STEPS,
        description="a scripted plan; skips LLM planning (the allowlist still applies)",
    )
    subtasks: list[Subtask] | None = Field(
        default=None,
        max_length=4,
        description="planner only: a scripted split; skips LLM splitting (waits stay bounded)",
    )


def _key(task_id: str) -> str:
    return f"fd:task:{task_id}"


def _score(priority: int) -> float:
    # Lower score first: priority, then arrival time.
    return priority * 1e11 + time.time()


class TaskEngine:
    """Workers, the Redis-backed queue, checkpoints and resume-at-start."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._workers: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self.resumed = 0
        self._schemas: dict[str, dict[str, Any]] = {}

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        self._spawn(self._resume_loop())
        for n in range(self.rt.cfg.workers):
            self._workers.append(asyncio.create_task(self._worker(n), name=f"task-worker-{n}"))

    async def stop(self) -> None:
        self._stopping.set()
        for t in [*self._workers, *self._background]:
            t.cancel()
        await asyncio.gather(*self._workers, *self._background, return_exceptions=True)

    def _spawn(self, coro: Any) -> None:
        t = asyncio.create_task(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    def _deadline(self, seconds: float) -> Deadline:
        return Deadline(seconds)

    async def _r(self, op: str, make: Any) -> Any:
        return await self.rt.redis(
            op, make, deadline=self._deadline(self.rt.policy.timeouts.tool_call)
        )

    async def _resume_loop(self) -> None:
        """Re-queue every unfinished task; retried until Redis answers (each try bounded)."""
        delay = 0.2
        while not self._stopping.is_set():
            try:
                ids = await self._r("resume", lambda: self.rt.store.r.smembers(OPEN))
                for tid in sorted(ids):
                    await self._r(
                        "resume", lambda t=tid: self.rt.store.r.zadd(QUEUE, {t: _score(0)}, nx=True)
                    )
                    self.rt.metrics.resumes.inc()
                    self.resumed += 1
                if ids:
                    log.info("resumed %d unfinished tasks", len(ids))
                return
            except DependencyError as exc:
                log.warning("resume waits for redis: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    # -- API ---------------------------------------------------------------------------
    async def submit(self, req: TaskRequest, *, trace_id: str) -> tuple[Task, bool]:
        """Create a task (or return the one with this idempotency key); (task, created?)."""
        if req.agent not in self.rt.cfg.agents:
            raise KeyError(req.agent)
        task = Task(
            id=uuid.uuid4().hex[:16],
            agent=req.agent,
            goal=req.goal,
            idempotency_key=req.idempotency_key,
            plan=list(req.steps) if req.steps is not None else None,
            split=list(req.subtasks) if req.subtasks is not None else None,
            priority=req.priority,
            trace_id=trace_id,
            traceparent=inject().get("traceparent", ""),
        )
        try:
            return await self._create(task)
        except DependencyError as exc:
            raise Unavailable(f"task store: {exc}") from exc

    async def _create(self, task: Task) -> tuple[Task, bool]:
        r = self.rt.store.r
        ikey = f"fd:taskkey:{task.agent}:{task.idempotency_key}"
        won = await self._r("submit", lambda: r.set(ikey, task.id, nx=True))
        if not won:
            existing = await self._r("submit", lambda: r.get(ikey))
            old = await self.get(str(existing))
            if old is not None:
                return old, False
        await self._checkpoint(task)
        await self._r("submit", lambda: r.sadd(OPEN, task.id))
        await self._r("submit", lambda: r.zadd(QUEUE, {task.id: _score(task.priority)}))
        self.rt.metrics.tasks.labels(TaskStatus.QUEUED).inc()
        return task, True

    async def get(self, task_id: str) -> Task | None:
        raw = await self._r("get", lambda: self.rt.store.r.get(_key(task_id)))
        return Task.model_validate_json(raw) if raw else None

    async def queue_depth(self) -> int:
        return int(await self._r("depth", lambda: self.rt.store.r.zcard(QUEUE)))

    # -- workers -----------------------------------------------------------------------
    async def _worker(self, n: int) -> None:
        # A task's first call must not spend its timeout importing the client SDKs.
        await self.rt.sdks.ready()
        delay = POLL_S
        while not self._stopping.is_set():
            try:
                # Untraced: ~40 polls a second per agent, nearly all empty, were a third of a
                # run's spans (bench/tracing); a task popped runs in its submitter's trace.
                with trace.use_span(_UNSAMPLED):
                    popped = await self._r("pop", lambda: self.rt.store.r.zpopmin(QUEUE, 1))
            except DependencyError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = POLL_S
            if not popped:
                await asyncio.sleep(POLL_S)
                continue
            task_id = str(popped[0][0])
            self.rt.metrics.tasks_active.inc()
            try:
                await self._run(task_id)
            except (DependencyError, Unavailable) as exc:
                # Most likely the checkpoint store itself; the task stays open and comes back.
                log.warning("worker %d: task %s interrupted: %s", n, task_id, exc)
                self._requeue_later(task_id, 1.0)
            except Exception:
                log.exception("worker %d: task %s crashed", n, task_id)
                self._requeue_later(task_id, 1.0)
            finally:
                self.rt.metrics.tasks_active.dec()

    def _requeue_later(self, task_id: str, delay: float, priority: int = 0) -> None:
        async def later() -> None:
            await asyncio.sleep(delay)
            for _ in range(120):  # bounded: ~2 min of tries, then resume-at-start covers it
                try:
                    await self._r(
                        "requeue",
                        lambda: self.rt.store.r.zadd(QUEUE, {task_id: _score(priority)}, nx=True),
                    )
                    return
                except DependencyError:
                    await asyncio.sleep(1.0)
            log.error("task %s could not be re-queued; it is resumed at the next start", task_id)

        self._spawn(later())

    async def _checkpoint(self, task: Task) -> None:
        task.checkpoints += 1
        body = task.model_dump_json()
        try:
            await self._r("checkpoint", lambda: self.rt.store.r.set(_key(task.id), body))
        except DependencyError:
            self.rt.metrics.checkpoints.labels("error").inc()
            raise
        self.rt.metrics.checkpoints.labels("ok").inc()

    async def _transition(self, task: Task, status: TaskStatus) -> None:
        task.status = status
        await self._checkpoint(task)
        self.rt.metrics.tasks.labels(status).inc()

    async def _run(self, task_id: str) -> None:
        task = await self.get(task_id)
        if task is None or task.finished:
            await self._r("close", lambda: self.rt.store.r.srem(OPEN, task_id))
            return
        if task.started is None:
            task.started = time.time()
        task.runs += 1
        budget = self.rt.policy.timeouts.task - (time.time() - task.started)
        with self.rt.tracer.start_as_current_span(
            f"task {task.agent}", context=PROPAGATOR.extract({"traceparent": task.traceparent})
        ) as span:
            span.set_attribute("faultday.task", task.id)
            span.set_attribute("faultday.task.run", task.runs)
            if not task.trace_id:
                task.trace_id = f"{span.get_span_context().trace_id:032x}"
            if budget <= 0:
                await self._finish(task, TaskStatus.FAILED, error="task deadline exceeded")
                return
            await self._advance(task, Deadline(budget))

    async def _advance(self, task: Task, deadline: Deadline) -> None:
        out = Outcome(list(task.degraded_reasons))
        if task.agent == "planner" and not task.children:
            await self._plan_subtasks(task, deadline, out)  # re-queues itself to wait
            return
        if task.children:
            if not await self._children_ready(task, out):
                return
        elif task.depends_on and not await self._deps_ready(task, out):
            return
        if task.plan is None:
            task.plan = await self._plan(task, deadline, out)
        if task.status != TaskStatus.ACTING:
            task.degraded_reasons = out.degraded
            await self._transition(task, TaskStatus.ACTING)
        while task.step < len(task.plan):
            if deadline.expired():
                await self._finish(task, TaskStatus.FAILED, error="task deadline exceeded")
                return
            if not await self._act(task, task.step, task.plan[task.step], deadline, out):
                return
            task.step += 1
            task.degraded_reasons = out.degraded
            await self._checkpoint(task)  # after every step: a replay starts at the next one
        await self._answer(task, deadline, out)

    # -- planning ----------------------------------------------------------------------
    async def _tool_specs(self, agent: str, deadline: Deadline) -> list[dict[str, Any]]:
        """The agent's allowlisted tools with their schemas (listed once, then cached)."""
        if not self._schemas:
            try:
                self._schemas = await self.rt.res.call(
                    "tools",
                    lambda to: self.rt.tools.schemas(timeout=to),
                    timeout=self.rt.policy.timeouts.tool_call,
                    deadline=deadline,
                    op="list",
                )
            except DependencyError as exc:
                # Plan without schemas; the server still validates every call.
                log.warning("tool schemas unavailable: %s", exc)
        return [
            {
                "type": "function",
                "function": {
                    "name": t,
                    "description": f"tool {t}",
                    "parameters": self._schemas.get(t, {"type": "object"}),
                },
            }
            for t in self.rt.cfg.agents[agent].tools
        ]

    async def _plan(self, task: Task, deadline: Deadline, out: Outcome) -> list[Step]:
        spec = self.rt.cfg.agents[task.agent]
        await self._transition(task, TaskStatus.PLANNING)
        plan: list[Step] = []
        if spec.tools:
            msgs = [
                {"role": "system", "content": spec.system},
                {"role": "user", "content": task.goal},
            ]
            try:
                reply = await self.rt.generate(
                    msgs,
                    deadline=deadline,
                    out=out,
                    tools=await self._tool_specs(task.agent, deadline),
                )
            except Unavailable:
                reply = None
            if reply is not None:
                plan = _steps_from_calls(reply.tool_calls, task.id)
        if not plan and spec.playbook:
            # The model proposed nothing usable: run the reviewed playbook instead.
            plan = [_fill(s, task) for s in spec.playbook]
            self.rt.metrics.fallbacks.labels("plan", "playbook").inc()
        return plan

    # -- acting ------------------------------------------------------------------------
    async def _act(self, task: Task, i: int, step: Step, deadline: Deadline, out: Outcome) -> bool:
        """Run one step; False when the task has ended (failed) on it."""
        args: dict[str, Any] = dict(step.args)
        if step.tool == "send_message":
            # Deterministic per task and step: a replay after a crash is deduplicated.
            args["idempotency_key"] = f"task-{task.id}-step-{i}"
        allowed = step.tool in self.rt.cfg.agents[task.agent].tools
        t0 = time.monotonic()
        if not allowed:
            self.rt.metrics.tool_calls.labels(step.tool, "denied").inc()
            _denied_span(self.rt.tracer, step.tool)
            await self._audit(
                task, step, args, decision="denied", result="not in the agent's allowlist", t0=None
            )
            task.observations.append(
                Observation(
                    step=i, tool=step.tool, ok=False, summary="denied: not in the allowlist"
                )
            )
            out.mark(f"tool_denied:{step.tool}")
            return True
        meta = {
            "faultday/agent": task.agent,
            "faultday/task": task.id,
            "faultday/trace_id": task.trace_id,
        }
        try:
            res = await self.rt.res.call(
                "tools",
                lambda to: self.rt.tools.call(step.tool, args, timeout=to, meta=meta),
                timeout=self.rt.policy.timeouts.tool_call,
                deadline=deadline,
                op=step.tool,
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": step.tool},
            )
        except DependencyError as exc:
            self.rt.metrics.tool_calls.labels(step.tool, "error").inc()
            await self._audit(
                task, step, args, decision="allowed", result=f"error: {exc.reason}", t0=t0
            )
            if not self.rt.policy.fallback:
                await self._finish(task, TaskStatus.FAILED, error=str(exc))
                return False
            task.observations.append(
                Observation(step=i, tool=step.tool, ok=False, summary=f"error: {exc.reason}"[:300])
            )
            out.mark(f"tool_failed:{step.tool}")
            return True
        self.rt.metrics.tool_calls.labels(step.tool, "ok").inc()
        ref = f"fd:result:{task.id}:{i}"
        body = json.dumps(res.data, default=str)
        await self._r("result", lambda: self.rt.store.r.set(ref, body, ex=86_400))
        await self._audit(task, step, args, decision="allowed", result=body, t0=t0)
        task.observations.append(
            Observation(step=i, tool=step.tool, ok=True, ref=ref, summary=body[:200])
        )
        return True

    async def _audit(
        self,
        task: Task,
        step: Step,
        args: dict[str, Any],
        *,
        decision: str,
        result: str,
        t0: float | None,
    ) -> None:
        """One tool call in the audit log; its latency from ``t0`` (None: it never ran)."""
        await self.rt.audit.record(
            agent=task.agent,
            task=task.id,
            trace_id=task.trace_id,
            tool=step.tool,
            args=args,
            decision=decision,
            result=result,
            latency_s=0.0 if t0 is None else time.monotonic() - t0,
        )

    # -- answering ---------------------------------------------------------------------
    async def _answer(self, task: Task, deadline: Deadline, out: Outcome) -> None:
        await self._transition(task, TaskStatus.ANSWERING)
        notes = "\n".join(
            f"- {o.tool}: {'ok' if o.ok else 'failed'} {o.summary}" for o in task.observations
        )
        for child in task.children:
            res = await self._r("result", lambda c=child: self.rt.store.r.get(f"fd:result:{c}"))
            notes += f"\n- subtask {child}: {(res or 'no result')[:300]}"
        msgs = [
            {"role": "system", "content": "Summarise the outcome for the user in two lines."},
            {"role": "user", "content": f"Goal: {task.goal}\nObservations:\n{notes}"},
        ]
        try:
            reply = await self.rt.generate(msgs, deadline=deadline, out=out)
        except Unavailable as exc:
            await self._finish(task, TaskStatus.FAILED, error=str(exc))
            return
        task.answer = reply.text
        task.model = reply.model
        task.degraded_reasons = out.degraded
        await self._finish(task, TaskStatus.DONE)

    async def _finish(self, task: Task, status: TaskStatus, *, error: str = "") -> None:
        task.error = error
        r = self.rt.store.r
        if status == TaskStatus.DONE:
            answer = task.answer
            await self._r("result", lambda: r.set(f"fd:result:{task.id}", answer, ex=86_400))
        await self._transition(task, status)
        await self._r("close", lambda: r.srem(OPEN, task.id))
        for reason in task.degraded_reasons:
            self.rt.metrics.degraded.labels(reason).inc()

    # -- multi-agent ---------------------------------------------------------------------
    async def _plan_subtasks(self, task: Task, deadline: Deadline, out: Outcome) -> None:
        """Planner: create the subtasks once (ids are derived, so a replay creates none twice)."""
        await self._transition(task, TaskStatus.PLANNING)
        specs = await self._split(task, deadline, out)
        ids = [f"{task.id}-{k}" for k in range(len(specs))]
        for k, (goal, agent, prio, deps) in enumerate(specs):
            child = Task(
                id=ids[k],
                agent=agent,
                goal=goal,
                priority=prio,
                parent=task.id,
                idempotency_key=f"{task.idempotency_key}/{k}",
                depends_on=[ids[d] for d in deps if 0 <= d < len(ids) and d != k],
                trace_id=task.trace_id,
                traceparent=inject().get("traceparent", ""),
            )
            if await self.get(child.id) is None:
                await self._create(child)
        task.children = ids
        task.plan = []
        task.waiting_since = time.time()
        await self._transition(task, TaskStatus.WAITING)
        self._requeue_later(task.id, REQUEUE_S, task.priority)

    async def _split(
        self, task: Task, deadline: Deadline, out: Outcome
    ) -> list[tuple[str, str, int, list[int]]]:
        agents = set(self.rt.cfg.agents) - {"planner"}
        if task.split is not None:
            return [
                (s.goal, s.agent if s.agent in agents else "report", s.priority, s.depends_on)
                for s in task.split
            ]
        msgs = [
            {"role": "system", "content": self.rt.cfg.agents["planner"].system},
            {"role": "user", "content": task.goal},
        ]
        try:
            reply = await self.rt.generate(msgs, deadline=deadline, out=out)
            parsed = _parse_subtasks(reply.text, agents)
        except Unavailable:
            parsed = []
        if parsed:
            return parsed
        # Deterministic split: one subtask per clause, each depending on none.
        self.rt.metrics.fallbacks.labels("plan", "split").inc()
        parts = [p.strip() for p in re.split(r";|\bthen\b", task.goal) if p.strip()][:4]
        return [(p, "report", task.priority, []) for p in parts or [task.goal]]

    async def _children_ready(self, task: Task, out: Outcome) -> bool:
        done = 0
        for cid in task.children:
            child = await self.get(cid)
            done += bool(child is not None and child.finished)
        if done == len(task.children):
            return True
        return await self._wait_or_fallback(task, out, "subtasks_timed_out")

    async def _deps_ready(self, task: Task, out: Outcome) -> bool:
        for dep in task.depends_on:
            d = await self.get(dep)
            if d is None or not d.finished:
                return await self._wait_or_fallback(task, out, "dependency_timed_out")
        return True

    async def _wait_or_fallback(self, task: Task, out: Outcome, reason: str) -> bool:
        """Not ready: re-queue without holding a worker; past the cap, go on degraded."""
        if task.waiting_since is None:
            task.waiting_since = time.time()
            await self._transition(task, TaskStatus.WAITING)
        if time.time() - task.waiting_since > self.rt.policy.timeouts.wait:
            out.mark(reason)
            task.degraded_reasons = out.degraded
            return True
        self._requeue_later(task.id, REQUEUE_S, task.priority)
        return False


def _denied_span(tracer: Tracer, tool: str) -> None:
    """A tool call the allowlist refused: never sent, so an INTERNAL span, in error."""
    span = tracer.start_span(
        f"tools {tool}",
        attributes={
            "faultday.dependency": "tools",
            "gen_ai.tool.name": tool,
            "faultday.result": "denied",
        },
    )
    span.set_status(Status(StatusCode.ERROR, "not in the agent's allowlist"))
    span.end()


def _clean_args(args: dict[str, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in args.items() if isinstance(v, str | int | float | bool | dict)}


def _steps_from_calls(calls: list[ToolCall], task_id: str) -> list[Step]:
    """The model's tool calls as a plan, held to the limits a request is held to."""
    # A step a client could not have sent is dropped, not run: its checkpoint would not load.
    plan: list[Step] = []
    for c in calls[:MAX_STEPS]:
        try:
            plan.append(Step(tool=c.name, args=_clean_args(c.args)))
        except ValidationError as exc:
            log.warning("task %s: dropped the model's call of %.64r: %s", task_id, c.name, exc)
    return plan


def _fill(step: Step, task: Task) -> Step:
    args = {
        k: v.replace("{goal}", task.goal)[:MAX_ARG_CHARS] if isinstance(v, str) else v
        for k, v in step.args.items()
    }
    return Step(tool=step.tool, args=args)


def _parse_subtasks(text: str, agents: set[str]) -> list[tuple[str, str, int, list[int]]]:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return []
    try:
        raw = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return []
    out = []
    for item in (raw.get("subtasks") or [])[:4] if isinstance(raw, dict) else []:
        if not isinstance(item, dict) or not isinstance(item.get("goal"), str):
            continue
        agent = item.get("agent") if item.get("agent") in agents else "report"
        raw_prio = item.get("priority")
        prio = raw_prio if isinstance(raw_prio, int) else 5
        deps = [d for d in item.get("depends_on") or [] if isinstance(d, int)]
        out.append((str(item["goal"])[:2000], str(agent), max(0, min(9, prio)), deps))
    return out

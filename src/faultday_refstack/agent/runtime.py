"""The composition root of the agent runtime, and RAG chat with its fallback chains."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.trace import Status, StatusCode, Tracer, get_current_span
from opentelemetry.util.types import AttributeValue

from faultday_refstack.agent.audit import AuditLog
from faultday_refstack.agent.canary import CanarySplit
from faultday_refstack.agent.config import AgentConfig
from faultday_refstack.agent.deps import (
    Embedder,
    Hit,
    Llm,
    LlmReply,
    Sdks,
    Store,
    Tools,
    Vector,
)
from faultday_refstack.agent.obs import Metrics, make_tracer_provider
from faultday_refstack.agent.resilience import Deadline, DependencyError, Resilience
from faultday_refstack.errors import UsageError
from faultday_wire.answers import CANNED, doc_marker
from faultday_wire.policy import Policy

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Every dependency address; the supervisor points these at proxies."""

    redis: str
    llm_primary: str
    llm_backup: str
    embedder: str
    qdrant: str
    tools: str
    llm_canary: str = ""  # only with models.canary in agent.yaml


@dataclass(slots=True)
class Outcome:
    """What a capability produced, and why it is degraded if it is."""

    degraded: list[str] = field(default_factory=list)

    def mark(self, reason: str) -> None:
        if reason not in self.degraded:
            self.degraded.append(reason)


class Unavailable(Exception):
    """A capability failed and the policy has no fallback for it."""

    def __init__(self, what: str, retry_after: float = 1.0) -> None:
        super().__init__(what)
        self.retry_after = retry_after


class Runtime:
    """Everything one runtime process holds: config, policy, clients, metrics, tracer."""

    def __init__(
        self,
        cfg: AgentConfig,
        policy: Policy,
        endpoints: Endpoints,
        *,
        traces: Path | None,
        audit: Path,
        policy_name: str,
    ) -> None:
        self.cfg = cfg
        self.policy = policy
        self.policy_name = policy_name
        self.endpoints = endpoints
        self.metrics = Metrics()
        self.tracer_provider = make_tracer_provider(jsonl=traces)
        self.tracer: Tracer = self.tracer_provider.get_tracer("faultday.agent")
        self.res = Resilience(policy, self.metrics, self.tracer)
        self.sdks = Sdks()  # the MCP SDK, for Tools; the app preloads it once it serves
        m = cfg.models
        self.llm_primary = Llm(endpoints.llm_primary, m.primary, max_tokens=m.max_tokens)
        self.llm_backup = Llm(endpoints.llm_backup, m.backup, max_tokens=m.max_tokens)
        self.canary: CanarySplit | None = None
        self.llm_canary: Llm | None = None
        if m.canary is not None and endpoints.llm_canary:
            self.canary = CanarySplit(m.canary)
            self.llm_canary = Llm(
                endpoints.llm_canary,
                m.canary.model,
                max_tokens=m.canary.max_tokens or m.max_tokens,
            )
            self.metrics.breaker_state.labels("llm-canary").set(0)
        elif m.canary is not None and m.canary.share > 0:
            raise UsageError("models.canary.share > 0 needs the canary's address (--llm-canary)")
        self.metrics.canary_share.set(self.canary.share if self.canary else 0.0)
        e = cfg.embedder
        self.embedder = Embedder(
            endpoints.embedder, model=e.model, input_name=e.input_name, output_name=e.output_name
        )
        self.vector = Vector(
            endpoints.qdrant,
            collection=cfg.vector.collection,
            top_k=cfg.vector.top_k,
        )
        self.store = Store(endpoints.redis, timeout=policy.timeouts.redis)
        self.tools = Tools(endpoints.tools, sdks=self.sdks)
        self.audit = AuditLog(audit, self.store, secret_keys=cfg.secret_keys)

    async def close(self) -> None:
        closers = [self.llm_canary.close] if self.llm_canary is not None else []
        for closer in (
            *closers,
            self.llm_primary.close,
            self.llm_backup.close,
            self.embedder.close,
            self.vector.close,
            self.store.close,
        ):
            try:
                await closer()
            except Exception as exc:  # noqa: BLE001 - shutting down; report and go on
                log.warning("closing a client failed: %s", exc)
        self.tracer_provider.shutdown()  # flushes the spans still queued

    # -- redis helpers -----------------------------------------------------------------
    async def redis(self, op: str, make: Any, *, deadline: Deadline) -> Any:
        """One Redis command under the policy (``make`` builds a fresh coroutine per attempt)."""
        return await self.res.call(
            "redis",
            lambda _t: self.store.run(make()),
            timeout=self.policy.timeouts.redis,
            deadline=deadline,
            op=op,
        )

    # -- canary --------------------------------------------------------------------------
    def set_canary_share(self, share: float) -> float:
        """Route ``share`` of chat requests to the canary; returns the previous share."""
        if self.canary is None:
            raise UsageError("no canary configured (models.canary and --llm-canary)")
        previous = self.canary.set_share(share)
        self.metrics.canary_share.set(share)
        log.info("canary share %.4g -> %.4g", previous, share)
        return previous

    def _canary_for(self, route_key: str | None) -> Llm | None:
        if route_key is None or self.canary is None or not self.canary.routes(route_key):
            return None
        return self.llm_canary

    async def _try_canary(
        self,
        llm: Llm,
        messages: list[dict[str, Any]],
        *,
        deadline: Deadline,
        tools: list[dict[str, Any]] | None,
    ) -> LlmReply | None:
        """One call to the canary; on failure the primary chain answers (never worse off)."""
        t = self.policy.timeouts
        # Leave a model call each for the primary and the backup behind it.
        reserve = 2 * t.model_call if self.policy.fallback else 0.0
        try:
            return await self.res.call(
                "llm-canary",
                lambda to: llm.chat(messages, timeout=to, tools=tools),
                timeout=t.model_call,
                deadline=Deadline(max(0.0, deadline.remaining() - reserve)),
                op="chat",
                attributes=_chat_attrs(llm),
            )
        except DependencyError as exc:
            self._hop("llm", "canary", "primary", str(exc))
            return None

    # -- LLM chain -----------------------------------------------------------------------
    async def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        deadline: Deadline,
        out: Outcome,
        tools: list[dict[str, Any]] | None = None,
        route_key: str | None = None,
    ) -> LlmReply:
        """[canary →] primary → backup → canned answer (the canned answer only with ``fallback``).

        ``route_key`` (chat only) lets the canary split pick this request.
        """
        t = self.policy.timeouts
        fallback = self.policy.fallback
        canary = self._canary_for(route_key)
        if canary is not None:
            reply = await self._try_canary(canary, messages, deadline=deadline, tools=tools)
            if reply is not None:
                return reply
        # Keep one model call's worth of time for the backup, or it could never answer.
        primary_deadline = (
            Deadline(max(0.0, deadline.remaining() - t.model_call)) if fallback else deadline
        )
        try:
            return await self.res.call(
                "llm-primary",
                lambda to: self.llm_primary.chat(messages, timeout=to, tools=tools),
                timeout=t.model_call,
                deadline=primary_deadline,
                op="chat",
                attributes=_chat_attrs(self.llm_primary),
            )
        except DependencyError as exc:
            if not fallback:
                raise Unavailable(f"llm: {exc}", retry_after=exc.retry_after or 1.0) from exc
            self._hop("llm", "primary", "backup", str(exc))
        try:
            reply = await self.res.call(
                "llm-backup",
                lambda to: self.llm_backup.chat(messages, timeout=to, tools=tools),
                timeout=t.model_call,
                deadline=deadline,
                op="chat",
                attributes=_chat_attrs(self.llm_backup),
            )
        except DependencyError as exc:
            self._hop("llm", "backup", "canned", str(exc))
            out.mark("llm_unavailable")
            return LlmReply(text=self.cfg.canned_answer, model=CANNED, canned=True)
        out.mark("llm_backup")
        return reply

    def _hop(self, capability: str, frm: str, to: str, why: str) -> None:
        """A fallback taken: counted, and a span saying from what, to what and why."""
        self.metrics.fallbacks.labels(capability, to).inc()
        self.tracer.start_span(
            f"fallback {capability} -> {to}",
            attributes={
                "fallback.capability": capability,
                "fallback.from": frm,
                "fallback.to": to,
                "fallback.reason": why[:300],
            },
        ).end()

    # -- chat ----------------------------------------------------------------------------
    async def chat(
        self,
        *,
        session_id: str,
        message: str,
        rag: bool,
        deadline: Deadline,
        request_id: str = "",
    ) -> dict[str, Any]:
        out = Outcome()
        key = f"fd:session:{session_id}"
        turns = self.cfg.history_turns * 2
        history: list[dict[str, Any]] | None = []
        try:
            raw = (
                await self.redis("history", lambda: self._history(key, turns), deadline=deadline)
                if turns
                else []
            )
            history = [json.loads(x) for x in raw]
        except DependencyError as exc:
            if not self.policy.fallback:
                raise Unavailable(f"history: {exc}") from exc
            self._hop("history", "redis", "none", str(exc))
            out.mark("history_unavailable")
            history = None
        hits: list[Hit] = []
        if rag:
            hits = await self._retrieve(message, deadline=deadline, out=out)
        msgs: list[dict[str, Any]] = [{"role": "system", "content": self._system(hits)}]
        msgs += history or []
        msgs.append({"role": "user", "content": message})
        route_key = (
            self.canary.key(session_id=session_id, request_id=request_id) if self.canary else None
        )
        reply = await self.generate(msgs, deadline=deadline, out=out, route_key=route_key)
        self._count_answer(reply)
        if history is not None:
            await self._save_turns(key, message, reply.text, deadline=deadline, out=out)
        for reason in out.degraded:
            self.metrics.degraded.labels(reason).inc()
        # The request's SERVER span (current here): what answered, and how degraded.
        get_current_span().set_attributes(
            {
                "gen_ai.response.model": reply.model,
                "faultday.canned": reply.canned,
                "faultday.degraded": bool(out.degraded),
                "faultday.degraded_reasons": out.degraded,
            }
        )
        return {
            "answer": reply.text,
            "model": reply.model,
            "degraded": bool(out.degraded),
            "degraded_reasons": out.degraded,
            "sources": [h.id for h in hits],
            "canned": reply.canned,
            "policy": self.policy_name,
            "usage": {"completion_tokens": reply.completion_tokens},
        }

    async def _history(self, key: str, turns: int) -> list[bytes | str]:
        """The session's last turns; a hit or a miss on the attempt's span (cache.hit)."""
        raw: list[bytes | str] = await self.store.r.lrange(key, -turns, -1)
        get_current_span().set_attribute("cache.hit", bool(raw))
        return raw

    def _count_answer(self, reply: LlmReply) -> None:
        self.metrics.model_requests.labels(reply.model).inc()
        if reply.completion_tokens:
            self.metrics.completion_tokens.labels(reply.model).inc(reply.completion_tokens)
            self.metrics.completion_tokens_per_request.labels(reply.model).observe(
                reply.completion_tokens
            )

    def _system(self, hits: list[Hit]) -> str:
        if not hits:
            return "You are a concise assistant."
        # Each document behind its marker: a grounded model cites the ones it used.
        ctx = "\n".join(f"{doc_marker(h.id)} {h.text}" for h in hits)
        return f"You are a concise assistant. Answer from this context:\n{ctx}"

    async def _retrieve(self, text: str, *, deadline: Deadline, out: Outcome) -> list[Hit]:
        with self.tracer.start_as_current_span("retrieval") as span:
            hits = await self._retrieve_in(text, deadline=deadline, out=out)
            span.set_attribute("retrieval.hits", len(hits))
            if "retrieval_unavailable" in out.degraded:
                span.set_status(Status(StatusCode.ERROR, "retrieval unavailable"))
            return hits

    async def _retrieve_in(self, text: str, *, deadline: Deadline, out: Outcome) -> list[Hit]:
        t = self.policy.timeouts
        try:
            vec = await self.res.call(
                "embedder",
                lambda to: self.embedder.embed(text, timeout=to),
                timeout=t.embed,
                deadline=deadline,
                op="embed",
            )
            hits = await self.res.call(
                "vector",
                lambda to: self.vector.search(vec, timeout=to),
                timeout=t.vector,
                deadline=deadline,
                op="search",
            )
        except DependencyError as exc:
            if not self.policy.fallback:
                raise Unavailable(f"retrieval: {exc}") from exc
            self._hop("retrieval", "rag", "no_context", str(exc))
            out.mark("retrieval_unavailable")
            return []
        self.metrics.retrieval_hits.observe(len(hits))
        return hits

    async def _save_turns(
        self, key: str, user: str, answer: str, *, deadline: Deadline, out: Outcome
    ) -> None:
        turns = self.cfg.history_turns * 2
        if not turns:
            return
        u = json.dumps({"role": "user", "content": user})
        a = json.dumps({"role": "assistant", "content": answer})

        async def write() -> None:
            pipe = self.store.r.pipeline(transaction=True)
            pipe.rpush(key, u, a)
            pipe.ltrim(key, -turns, -1)
            pipe.expire(key, 86_400)
            await pipe.execute()

        try:
            await self.redis("save_history", write, deadline=deadline)
        except DependencyError:
            out.mark("history_not_saved")


def _chat_attrs(llm: Llm) -> dict[str, AttributeValue]:
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": llm.model}

"""The locustfile: runs ONLY inside the Locust child process (it is gevent-patched).

Never import this module in the harness. It reads its ``LoadConfig`` from the
``FAULTDAY_LOAD`` environment variable and streams one JSON line per request
to the harness' event socket as soon as the request ends: the exact raw
events the time series and the checks are computed from (Locust's own stats
round latencies into buckets; ours do not).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.lock import Semaphore
from locust import FastHttpUser, LoadTestShape, constant, events, task
from locust.exception import StopUser

from faultday.core.loadconfig import ENV_VAR, LoadConfig, Shape, Workload, users_at
from faultday.core.records import AnswerLabel
from faultday.load.quality import (
    READ_LIMIT,
    Answer,
    Reservoir,
    answer_text,
    chunk_text,
    first_bytes,
    label,
    sources_of,
    stream_finished,
)
from faultday.load.tracecontext import HEADER, Trace, TraceStarter
from faultday_wire.answers import ANSWER_HEADER, CANNED, cited

log = logging.getLogger("faultday.load.locustfile")

CONFIG = LoadConfig.model_validate_json(os.environ[ENV_VAR])
QUESTIONS = (
    "How do I rotate the API keys of the billing service?",
    "What is our on-call escalation policy for SEV2 incidents?",
    "Summarise last quarter's revenue by region.",
    "Which GPUs does the inference cluster use and how are they monitored?",
    "How do I restore the vector index from a snapshot?",
    "What does the runbook say about a circuit breaker that stays open?",
    "Explain the retry budget of the agent runtime.",
    "Who approves a change to the production model?",
)
TERMINAL = ("done", "failed")
# Which answers this process quotes (per time slot; the harness keeps the texts).
RESERVOIR = Reservoir(cap=CONFIG.answers.cap, edges=CONFIG.answers.edges, seed=CONFIG.seed)
TASK_LABELS = {"done": AnswerLabel.OK, "unfinished": AnswerLabel.TIMEOUT}
# Each request's W3C trace: random ids (the process' own RNG, never the load mix's seed).
TRACES = TraceStarter(CONFIG.traces)


class Sink:
    """One connection to the harness; one JSON line per event; safe across greenlets."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=10)
        self._lock = Semaphore()
        self.sent = 0
        self.issued = 0
        self.capped = False

    def send(self, event: dict[str, Any]) -> None:
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                self._sock.sendall(line)
            except OSError:
                # The harness went away: nobody is listening, so stop loading.
                self.capped = True
                return
        self.sent += 1

    def reserve(self) -> bool:
        """Claim one request of this process' cap before sending it (greenlets run in turn)."""
        if self.capped or (CONFIG.max_requests is not None and self.issued >= CONFIG.max_requests):
            return False
        self.issued += 1
        return True

    def close(self) -> None:
        with self._lock, contextlib.suppress(OSError):
            self._sock.close()


_SINK: list[Sink] = []  # one per process, made by the first user that needs it
_SINK_LOCK = Semaphore()


def _sink() -> Sink:
    # Connecting yields to other greenlets; the lock keeps it to one connection.
    with _SINK_LOCK:
        if not _SINK:
            _SINK.append(Sink(CONFIG.sink))
    return _SINK[0]


@events.test_stop.add_listener  # type: ignore[untyped-decorator]
def _close_sink(**_: Any) -> None:
    for s in _SINK:
        s.close()


@dataclass(slots=True)
class Streamed:
    """What an SSE body said: an in-stream error, the answer's text, whether it ended."""

    error: str = ""
    text: str = ""
    finished: bool = False


def _parse_sse(resp: Any, start: float, out: dict[str, Any]) -> Streamed:
    """Read an SSE body; fill ttft, itl and tokens; return its error, text and end."""
    buf = ""
    last: float | None = None
    itl: list[float] = []
    tokens = 0
    seen = Streamed()
    for chunk in resp.iter_content(chunk_size=4096, decode_content=True):
        buf += chunk if isinstance(chunk, str) else chunk.decode("utf-8", "replace")
        while "\n" in buf:
            line, buf = buf.split("\n", 1)
            line = line.strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                seen.finished = True
                continue
            now = time.perf_counter()
            if '"error"' in data:
                seen.error = data[:200]
            try:
                obj: Any = json.loads(data)  # once per event: the token and the answer's text
            except ValueError:
                obj = None
            _answer_piece(obj, seen)
            if not _has_token(data, obj):
                continue
            tokens += 1
            if last is None:
                out["ttft"] = round(now - start, 6)
            else:
                itl.append(round(now - last, 6))
            last = now
    out["itl"] = itl
    out["tok"] = tokens
    return seen


def _answer_piece(obj: Any, seen: Streamed) -> None:
    if len(seen.text) < READ_LIMIT:
        seen.text += chunk_text(obj)
    seen.finished = seen.finished or stream_finished(obj)


def _timed_out(error: object) -> bool:
    """A client-side timeout (gevent's, the socket's), as FastHttpUser reports one."""
    name = type(error).__name__.lower()
    return isinstance(error, TimeoutError) or "timeout" in name or "timed out" in str(error)


def _has_token(data: str, obj: Any) -> bool:
    """An OpenAI-style chunk with content (role-only and usage-only chunks carry no token).

    ``obj`` is ``data`` parsed as JSON (None when it is not JSON: any text is a token)."""
    if obj is None:
        return bool(data)
    if not isinstance(obj, dict):
        return True
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or choice.get("text") or delta.get("tool_calls"):
            return True
    return "token" in obj or "content" in obj


class FaultdayUser(FastHttpUser):
    """One simulated client; what it does depends on the configured workload."""

    host = CONFIG.base_urls.get(
        "agent" if CONFIG.workload != Workload.HTTP else CONFIG.http.target, "http://127.0.0.1:1"
    )
    wait_time = constant(CONFIG.think_time)
    network_timeout = CONFIG.request_timeout
    connection_timeout = min(CONFIG.request_timeout, 10.0)

    def on_start(self) -> None:
        self.rng = random.Random(CONFIG.seed + id(self))  # noqa: S311 - load mix, not crypto
        self.session_id = uuid.uuid4().hex[:12]
        self.sink = _sink()
        names = [w for w in ("chat", "rag", "agent") if CONFIG.weights.get(w, 0) > 0]
        self.mix = names or ["chat"]
        self.mix_weights = [CONFIG.weights.get(w, 0) for w in self.mix]

    @task
    def one(self) -> None:
        if time.time() >= CONFIG.end_wall or not self.sink.reserve():
            raise StopUser
        workload = CONFIG.workload
        if workload == Workload.MIXED:
            workload = Workload(self.rng.choices(self.mix, self.mix_weights)[0])
        if workload in (Workload.CHAT, Workload.RAG):
            self._chat(rag=workload == Workload.RAG)
        elif workload == Workload.AGENT:
            self._agent_task()
        elif workload == Workload.HTTP:
            spec = CONFIG.http
            self._request(
                f"{spec.method} {spec.path}",
                spec.method,
                spec.path,
                spec.body,
                stream=spec.stream,
                trace=TRACES.start(),
            )
        else:
            raise StopUser

    # ---- workloads --------------------------------------------------------------------
    def _chat(self, *, rag: bool) -> None:
        body = {"session_id": self.session_id, "message": self.rng.choice(QUESTIONS), "rag": rag}
        name = "rag" if rag else "chat"
        self._request(name, "POST", "/v1/chat", body, stream=False, trace=TRACES.start())

    def _agent_task(self) -> None:
        goal = f"{self.rng.choice(QUESTIONS)} (ref {uuid.uuid4().hex[:8]})"
        body = {"agent": CONFIG.agent, "goal": goal, "idempotency_key": uuid.uuid4().hex}
        submitted = time.time()
        trace = TRACES.start()  # one trace for the task: its submit and its polls
        ev = self._request("task.submit", "POST", "/v1/tasks", body, stream=False, trace=trace)
        task_id = str(ev.get("tid") or "")
        if not ev["ok"] or not task_id:
            return
        state, last_status = "unknown", 0
        info: dict[str, Any] = {}
        deadline = min(time.time() + CONFIG.task_timeout, CONFIG.end_wall)
        while time.time() < deadline:
            self._sleep(CONFIG.poll_interval)
            status, info = self._poll(task_id, trace)
            last_status = status
            if status == 404:
                state = "lost"  # accepted, then forgotten: the runtime lost it
                break
            state = str(info.get("status") or state)
            if state in TERMINAL:
                break
        else:
            state = state if state in TERMINAL else "unfinished"
        reasons = info.get("degraded_reasons") or []
        out: dict[str, Any] = {
            "ts": submitted,
            "d": round(time.time() - submitted, 6),
            "ok": state == "done",
            "s": last_status,
            "n": "task",
            "tid": task_id,
            "st": state,
            "deg": bool(reasons),
            "r": list(reasons),
            "m": str(info.get("model") or ""),
            "e": "" if state == "done" else f"task {state}: {str(info.get('error') or '')[:160]}",
        }
        _traced(out, trace)
        # A task's answer is judged by its outcome: done, unfinished (timeout) or not.
        answer = Answer(status=last_status, text=str(info.get("answer") or ""), error=out["e"])
        self._judge(out, answer, TASK_LABELS.get(state, AnswerLabel.ERROR))
        self._emit(out)

    def _poll(self, task_id: str, trace: Trace | None) -> tuple[int, dict[str, Any]]:
        headers = {HEADER: trace.header()} if trace is not None else None
        resp = self.client.get(f"/v1/tasks/{task_id}", name="task.poll", headers=headers)
        status = int(resp.status_code or 0)
        try:
            data = resp.json() if status == 200 else {}
        except ValueError:
            data = {}
        return status, data if isinstance(data, dict) else {}

    def _sleep(self, seconds: float) -> None:
        gevent.sleep(seconds)

    # ---- one request, measured --------------------------------------------------------
    def _request(
        self, name: str, method: str, path: str, body: Any, *, stream: bool, trace: Trace | None
    ) -> dict[str, Any]:
        wall = time.time()
        start = time.perf_counter()
        ev: dict[str, Any] = {"ts": wall, "n": name}
        kwargs: dict[str, Any] = {"name": name, "stream": True}
        if body is not None:
            kwargs["json"] = body
        if trace is not None:
            kwargs["headers"] = {HEADER: trace.header()}
            _traced(ev, trace)
        resp = self.client.request(method, path, **kwargs)
        status = int(resp.status_code or 0)
        error = ""
        payload: Any = None
        text: str | None = None
        cut = False
        try:
            headers: Any = resp.headers or {}
            ctype = str(headers.get("content-type", "")) if status else ""
            if status and "text/event-stream" in ctype:
                seen = _parse_sse(resp, start, ev)
                error, text, cut = seen.error, seen.text, not seen.finished
            elif status:
                raw = resp.content or b""
                if "json" in ctype and raw:
                    payload = json.loads(raw)
                    text = answer_text(payload)
                text = text if text is not None else raw[:READ_LIMIT].decode("utf-8", "replace")
        except Exception as exc:  # noqa: BLE001 - any read failure is this request's error
            error = f"{type(exc).__name__}: {exc}"[:200]
            cut = 200 <= status < 300  # the answer began and broke off
        ev["d"] = round(time.perf_counter() - start, 6)
        if status == 0:
            error = error or str(getattr(resp, "error", "") or "no response")[:200]
        ok = 200 <= status < 400 and not error and not cut
        ev.update(ok=ok, s=status, e=error or ("" if ok else _why(status, cut)))
        self._degraded(resp, payload, ev)
        if name == "task.submit" and isinstance(payload, dict):
            ev["tid"] = str(payload.get("id") or payload.get("task_id") or "")
        else:
            rag = name == "rag" or (isinstance(body, dict) and body.get("rag") is True)
            answer = Answer(
                status=status,
                text=text,
                error=error,
                timed_out=status == 0 and _timed_out(getattr(resp, "error", None) or error),
                cut=cut,
                canned=_canned_mark(resp, payload),
                sources=sources_of(payload) if rag else None,
            )
            self._judge(ev, answer)
        self._emit(ev)
        ev["json"] = payload if isinstance(payload, dict) else None
        return ev

    @staticmethod
    def _judge(ev: dict[str, Any], answer: Answer, verdict: AnswerLabel | None = None) -> None:
        """Label the answer; quote its first bytes when the reservoir keeps it."""
        ev["q"] = str(verdict or label(answer, CONFIG.answers.canned))
        kept = RESERVOIR.offer(CONFIG.scenario_time(ev["ts"]))
        if kept is None:
            return
        text = answer.text or answer.error
        ev["qa"] = first_bytes(text, CONFIG.answers.text_bytes)
        ev["qk"] = [CONFIG.seed, *kept]
        if answer.sources is not None:
            ev["qs"] = [first_bytes(s, 64) for s in answer.sources[:20]]
        ev["qc"] = [first_bytes(c, 64) for c in cited(answer.text or "")[:20]]

    @staticmethod
    def _degraded(resp: Any, payload: Any, ev: dict[str, Any]) -> None:
        header = (resp.headers or {}).get("x-faultday-degraded", "") if resp.status_code else ""
        reasons: list[str] = [
            r.strip() for r in header.split(",") if r.strip() not in ("", "0", "1", "true", "false")
        ]
        if isinstance(payload, dict):
            reasons += [
                str(r) for r in payload.get("degraded_reasons") or () if str(r) not in reasons
            ]
            if payload.get("model"):
                ev["m"] = str(payload["model"])
            usage = payload.get("usage") or {}
            if isinstance(usage, dict) and usage.get("completion_tokens"):
                ev["tok"] = int(usage["completion_tokens"])
            elif isinstance(payload.get("answer"), str):
                ev["tok"] = len(payload["answer"].split())
            ev["deg"] = bool(payload.get("degraded")) or bool(reasons)
        else:
            ev["deg"] = bool(reasons) or header.strip().lower() in ("1", "true")
        ev["r"] = reasons

    def _emit(self, ev: dict[str, Any]) -> None:
        if ev["ts"] < CONFIG.end_wall:
            self.sink.send({k: v for k, v in ev.items() if k != "json"})


def _traced(ev: dict[str, Any], trace: Trace | None) -> None:
    """The trace a record joins to: its id (``tr``) and whether it was sampled (``trs``)."""
    if trace is not None:
        ev["tr"] = trace.trace_id
        ev["trs"] = trace.sampled


def _why(status: int, cut: bool) -> str:
    return "answer cut off" if cut else f"HTTP {status}"


def _canned_mark(resp: Any, payload: Any) -> bool:
    """The service says this answer is its fallback text (JSON ``canned`` or the header)."""
    if isinstance(payload, dict) and payload.get(CANNED) is True:
        return True
    headers: Any = (resp.headers or {}) if resp.status_code else {}
    return str(headers.get(ANSWER_HEADER, "")).strip().lower() == CANNED


class FaultdayShape(LoadTestShape):
    """constant, ramp, step or spike, on the harness' scenario clock; ends by itself."""

    def tick(self) -> tuple[int, float] | None:
        now = time.time()
        if now >= CONFIG.end_wall or CONFIG.workload == Workload.NONE:
            return None
        t = CONFIG.scenario_time(now)
        users = users_at(CONFIG.shape, t, duration=CONFIG.duration / CONFIG.time_scale)
        rate = CONFIG.shape.spawn_rate
        if CONFIG.shape.kind == Shape.SPIKE:
            rate = max(rate, float(users))  # a spike arrives at once
        return users, rate

"""Checks on the agent runtime's own records: the audit log, side effects, retrieval recall."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import httpx
from pydantic import Field

from faultday.checks.base import Check, CheckContext
from faultday.checks.common import (
    Count,
    Limits,
    Params,
    Pct,
    ShareBounds,
    counter_increase,
    from_problems,
    insufficient,
    judged,
    unjudged,
)
from faultday.core.windows import CheckResult, Verdict, Window
from faultday_wire.metrics import AGENT_TOOL_CALLS, total

log = logging.getLogger(__name__)

AUDIT_FILE = "agent/audit.jsonl"
TOOL_CALLS = total(AGENT_TOOL_CALLS)
PROBE_WORKERS = 4  # golden queries in flight at once during a recall probe


def run_dir_of(ctx: CheckContext) -> Path | None:
    run_dir = getattr(ctx, "run_dir", None)
    return Path(run_dir) if run_dir is not None else None


def _find_audit(bases: list[Path], file: str) -> Path | None:
    for base in bases:
        if (base / file).exists():
            return base / file
        found = sorted(base.glob("**/audit*.jsonl"))
        if found:
            return found[0]
    return None


def read_audit(ctx: CheckContext, file: str, window: Window) -> list[dict[str, Any]] | None:
    """Audit entries whose time falls in the window; None when there is no audit file."""
    # A shared stack (game day, pytest session) writes its audit log in its own folder.
    stack_dir = ctx.stack.run_dir if ctx.stack is not None else None
    bases = [b for b in (run_dir_of(ctx), stack_dir) if b is not None]
    path = _find_audit([Path(b) for b in bases], file)
    if path is None:
        return None
    t0 = getattr(getattr(ctx, "clock", None), "t0_wall", None)
    scale = getattr(ctx, "time_scale", 1.0)
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if t0 is not None and isinstance(entry.get("ts"), int | float):
            t = (entry["ts"] - t0) / scale
            if not window.start <= t < window.end:
                continue
        out.append(entry)
    return out


def _no_audit(check: str, window: Window, file: str) -> CheckResult:
    return unjudged(
        check, check, window, Verdict.INSUFFICIENT, f"no audit log at {file} in the run folder"
    )


# ---------------------------------------------------------------- audit


class AuditParams(Params):
    file: str = Field(default=AUDIT_FILE, description="under the run folder")
    min_denied: int = Field(default=1, ge=0, description="denied calls that must be on record")
    complete: bool = Field(default=True, description="every tool call the agent counted is audited")
    min_entries: int = Field(default=1, ge=1)


class Audit(Check[AuditParams]):
    """Every tool call is audited (vs the agent's own counter); denied calls are present."""

    name: ClassVar[str] = "audit"
    summary: ClassVar[str] = "every tool call audited; denied calls present"
    Params = AuditParams

    def evaluate(self, ctx: CheckContext, params: AuditParams, window: Window) -> CheckResult:
        entries = read_audit(ctx, params.file, window)
        if entries is None:
            return _no_audit(self.name, window, params.file)
        if len(entries) < params.min_entries:
            return insufficient(
                self.name,
                self.name,
                window,
                n=len(entries),
                need=params.min_entries,
                what="audit entries",
            )
        denied = sum(1 for e in entries if e.get("decision") == "denied")
        problems = []
        if denied < params.min_denied:
            problems.append(f"{denied} denied calls on record, want ≥ {params.min_denied}")
        counted, scrapes = counter_increase(ctx, TOOL_CALLS, window)
        if params.complete and scrapes and counted > len(entries):
            problems.append(
                f"the agent counted {counted:g} tool calls, the audit log has {len(entries)}"
            )
        observed = f"{len(entries)} entries, {denied} denied"
        if scrapes:
            observed += f", {counted:g} counted by the agent"
        expected = f"≥ {params.min_denied} denied" + (
            ", all calls audited" if params.complete else ""
        )
        return from_problems(
            self.name,
            self.name,
            window,
            problems,
            expected=expected,
            observed=observed,
            n=len(entries),
        )


# ---------------------------------------------------------------- duplicate_side_effects


class DuplicateParams(Params):
    max_: int = Field(default=0, alias="max", ge=0)
    tools: tuple[str, ...] = Field(
        default=("send_message", "update_record"), description="tools with side effects"
    )
    file: str = AUDIT_FILE


class DuplicateSideEffects(Check[DuplicateParams]):
    """A side effect (same task, tool and arguments) applied more than once under distinct keys.

    Repeats under the SAME idempotency key are not counted: the tool server
    applies those once. A repeat without any key is counted.
    """

    name: ClassVar[str] = "duplicate_side_effects"
    summary: ClassVar[str] = "side-effecting tool calls applied twice (must be 0)"
    Params = DuplicateParams

    def evaluate(self, ctx: CheckContext, params: DuplicateParams, window: Window) -> CheckResult:
        entries = read_audit(ctx, params.file, window)
        if entries is None:
            return _no_audit(self.name, window, params.file)
        effects = [
            e
            for e in entries
            if e.get("tool") in params.tools
            and e.get("decision") == "allowed"
            and not str(e.get("result", "")).startswith("error")
        ]
        groups: dict[str, list[str]] = {}
        for e in effects:
            args = dict(e.get("args") or {})
            key = str(args.pop("idempotency_key", "") or "")
            what = json.dumps([e.get("task"), e.get("tool"), args], sort_keys=True, default=str)
            groups.setdefault(what, []).append(key)
        dups = 0
        for keys in groups.values():
            applied = len({k for k in keys if k}) + sum(1 for k in keys if not k)
            dups += max(0, applied - 1)
        return judged(
            self.name,
            self.name,
            window,
            float(dups),
            bounds=Limits(max_=params.max_),
            fmt=Count(),
            n=len(effects),
        )


# ---------------------------------------------------------------- recall


class RecallParams(ShareBounds):
    k: int = Field(default=3, ge=1, le=100)
    vector: str = Field(
        default="qdrant", description="the vector store component (GET /admin/golden)"
    )
    embedder: str = Field(default="triton", description="KServe v2 embedder component")
    model: str = "embedder"
    input_name: str = "TEXT"
    output_name: str = "EMBEDDING"
    collection: str | None = Field(default=None, description="default: the golden set's collection")
    min_queries: int = Field(default=5, ge=1)
    timeout: float = Field(default=5.0, gt=0, le=60)


class Recall(Check[RecallParams]):
    """recall@k of the golden query set against the live vector store, judged at window end."""

    name: ClassVar[str] = "recall"
    summary: ClassVar[str] = "the golden retrieval set's recall@k"
    Params = RecallParams
    live: ClassVar[bool] = True

    def evaluate(self, ctx: CheckContext, params: RecallParams, window: Window) -> CheckResult:
        label = f"recall@{params.k}"
        vec_url = _http(ctx.target(params.vector).url)
        emb_url = _http(ctx.target(params.embedder).url)
        with httpx.Client(timeout=params.timeout) as client:
            golden = client.get(f"{vec_url}/admin/golden").raise_for_status().json()
            queries = golden.get("queries") or []
            collection = params.collection or golden.get("collection") or "docs"
            if len(queries) < params.min_queries:
                return insufficient(
                    self.name,
                    label,
                    window,
                    n=len(queries),
                    need=params.min_queries,
                    what="golden queries",
                )
            query_url = f"{vec_url}/collections/{collection}/points/query"

            def score(q: dict[str, Any]) -> float:
                expected = {str(x) for x in q.get("expected") or ()}
                if not expected:
                    return 0.0
                vector = _embed(client, emb_url, str(q["query"]), params)
                body = {"query": vector, "limit": params.k, "with_payload": True}
                r = client.post(query_url, json=body)
                r.raise_for_status()
                points = (r.json().get("result") or {}).get("points") or []
                got = {str((p.get("payload") or {}).get("doc_id", p.get("id"))) for p in points}
                return len(expected & got) / len(expected)

            # A live probe must end inside its window: the golden set is asked a few queries
            # at a time, not one after another (24 sequential pairs took 2 s under load).
            with ThreadPoolExecutor(max_workers=PROBE_WORKERS) as pool:
                total = sum(pool.map(score, queries))
        value = total / len(queries)
        return judged(self.name, label, window, value, bounds=params, fmt=Pct(), n=len(queries))


def _http(url: str) -> str:
    return (url if url.startswith("http") else f"http://{url}").rstrip("/")


def _embed(client: httpx.Client, base: str, text: str, p: RecallParams) -> list[float]:
    body = {
        "inputs": [{"name": p.input_name, "shape": [1, 1], "datatype": "BYTES", "data": [text]}]
    }
    r = client.post(f"{base}/v2/models/{p.model}/infer", json=body)
    r.raise_for_status()
    outputs = {o["name"]: o for o in r.json()["outputs"]}
    return [float(x) for x in outputs[p.output_name]["data"]]

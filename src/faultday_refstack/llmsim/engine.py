"""The engine model: a vLLM-v1-style scheduler stepping on a simulated clock.

Pure and synchronous: ``plan(now)`` chooses what one forward pass computes and
how long it takes; ``commit(plan, end)`` applies it and reports the tokens that
came out. The live server calls these from its engine loop at wall-clock step
boundaries; the benchmark calls them in virtual time to predict latencies.

What is modelled, after vLLM v1's scheduler: continuous batching bounded by
``max_num_seqs`` and a token budget (``max_num_batched_tokens``) with chunked
prefill; an FCFS waiting queue; paged KV blocks with a capacity; preemption by
recompute of the most recently admitted running request when blocks run out;
prefix caching of full prompt blocks with LRU eviction.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from enum import StrEnum

from faultday_refstack.llmsim.config import SimConfig


class ReqState(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request's state inside the engine (mutable, owned by the engine)."""

    req_id: str
    prompt: list[int]
    target_output: int  # tokens this request will generate before it finishes
    stop_reason: FinishReason  # reason reported when target_output is reached
    arrival: float
    max_tokens_param: int = 0
    state: ReqState = ReqState.WAITING
    num_computed: int = 0
    num_output: int = 0
    blocks: list[int] = field(default_factory=list)
    num_hashed_blocks: int = 0
    block_hashes: list[int] = field(default_factory=list)
    num_cached_tokens: int = -1  # prefix-cache hit at first admission; -1 until admitted
    first_scheduled: float = -1.0
    first_token: float = -1.0
    last_token: float = -1.0
    num_preemptions: int = 0
    finish_reason: FinishReason | None = None

    @property
    def total_tokens(self) -> int:
        return len(self.prompt) + self.num_output


@dataclass(frozen=True, slots=True)
class FinishedStats:
    """What vLLM records for a finished request (its histogram observations)."""

    req_id: str
    reason: FinishReason
    e2e: float
    queued: float
    prefill: float
    decode: float
    inference: float
    prompt_tokens: int
    generation_tokens: int
    max_tokens_param: int
    prefill_kv_computed: int
    num_preemptions: int = 0


@dataclass(slots=True)
class StepPlan:
    """What one forward pass computes; ``duration`` from the step-time model."""

    start: float
    duration: float
    scheduled: list[tuple[SimRequest, int]]
    prefill_tokens: int
    decode_seqs: int
    num_preempted: int
    preempted: list[SimRequest]
    context_tokens: int = 0  # KV tokens the step's attention reads (the GPU model's bytes)


@dataclass(slots=True)
class StepResult:
    """The outcome of one step: tokens out, requests finished, counters to add."""

    end: float
    new_tokens: list[SimRequest]  # each got exactly one new output token at ``end``
    finished: list[FinishedStats]
    num_prompt_tokens: int
    num_generation_tokens: int
    num_preempted: int
    prefix_queries: int
    prefix_hits: int
    ttfts: list[float]
    itls: list[float]
    iteration_tokens: int
    context_tokens: int = 0  # KV tokens the step's attention read (for the byte estimates)


class KVCache:
    """Paged KV blocks with a prefix cache of full blocks, evicted LRU."""

    def __init__(self, *, num_blocks: int, block_size: int, prefix_caching: bool) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.capacity = num_blocks  # usable blocks; a kv_shrink fault lowers it
        self.ref = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        # Blocks with no reference, oldest first; cached ones stay reusable until evicted.
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free)

    def usage(self) -> float:
        return min(1.0, self.num_used / self.capacity) if self.capacity else 1.0

    def lookup(self, req: SimRequest) -> list[int]:
        """Cached blocks for the longest prefix of the prompt (never its last token)."""
        if not self.prefix_caching:
            return []
        self._hash_prompt(req)
        limit = (len(req.prompt) - 1) // self.block_size
        hits: list[int] = []
        for h in req.block_hashes[:limit]:
            block = self.cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def _hash_prompt(self, req: SimRequest) -> None:
        if req.block_hashes:
            return
        bs = self.block_size
        parent = 0
        for i in range(len(req.prompt) // bs):
            parent = hash((parent, *req.prompt[i * bs : (i + 1) * bs]))
            req.block_hashes.append(parent)

    def can_allocate(self, req: SimRequest, num_tokens: int, hits: list[int]) -> bool:
        needed = self._needed(req, num_tokens, len(hits))
        hits_free = sum(1 for b in hits if self.ref[b] == 0)
        return self.num_used + hits_free + needed <= self.capacity

    def _needed(self, req: SimRequest, num_tokens: int, num_hits: int) -> int:
        have = len(req.blocks) + num_hits
        return max(0, math.ceil((req.num_computed + num_tokens) / self.block_size) - have)

    def allocate(self, req: SimRequest, num_tokens: int, hits: list[int]) -> None:
        """Touch the hit blocks and take new ones; the caller checked ``can_allocate``."""
        needed = self._needed(req, num_tokens, len(hits))
        for b in hits:
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1
            req.blocks.append(b)
        for _ in range(needed):
            b, _ = self.free.popitem(last=False)
            h = self.hash_of[b]
            if h is not None:
                if self.cached.get(h) == b:
                    del self.cached[h]
                self.hash_of[b] = None
            self.ref[b] = 1
            req.blocks.append(b)

    def cache_full_blocks(self, req: SimRequest) -> None:
        """Register the request's newly full prompt blocks in the prefix cache."""
        if not self.prefix_caching:
            return
        self._hash_prompt(req)
        full = min(req.num_computed // self.block_size, len(req.block_hashes), len(req.blocks))
        for i in range(req.num_hashed_blocks, full):
            b = req.blocks[i]
            h = req.block_hashes[i]
            if self.hash_of[b] is None and h not in self.cached:
                self.hash_of[b] = h
                self.cached[h] = b
        req.num_hashed_blocks = max(req.num_hashed_blocks, full)

    def release(self, req: SimRequest) -> None:
        # Tail blocks first, as vLLM does, so a prompt's head outlives its tail in the cache.
        for b in reversed(req.blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free[b] = None
        req.blocks.clear()
        req.num_hashed_blocks = 0


class Engine:
    """The scheduler and the KV cache of one simulated EngineCore."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.kv = KVCache(
            num_blocks=config.num_gpu_blocks,
            block_size=config.block_size,
            prefix_caching=config.enable_prefix_caching,
        )
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.requests: dict[str, SimRequest] = {}
        self.slowdown = 1.0  # throttle factor
        self._pending_preempted = 0
        self._queries = 0
        self._hits = 0

    # --- requests -----------------------------------------------------------------------------
    def add(self, req: SimRequest) -> None:
        self.requests[req.req_id] = req
        self.waiting.append(req)

    def abort(self, req_id: str) -> SimRequest | None:
        req = self.requests.pop(req_id, None)
        if req is None:
            return None
        if req.state == ReqState.RUNNING:
            self.running.remove(req)
        elif req.state == ReqState.WAITING:
            self.waiting.remove(req)
        self.kv.release(req)
        req.state = ReqState.FINISHED
        req.finish_reason = FinishReason.ABORT
        return req

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # --- capacity faults ------------------------------------------------------------------------
    def set_kv_capacity(self, blocks: int) -> int:
        """Cap usable KV blocks; preempt running requests until they fit. Returns preemptions."""
        self.kv.capacity = max(1, min(self.kv.num_blocks, blocks))
        n = 0
        while self.running and self.kv.num_used > self.kv.capacity:
            self._preempt(self.running.pop())
            n += 1
        self._pending_preempted += n
        return n

    # --- one step -----------------------------------------------------------------------------
    def plan(self, now: float) -> StepPlan:
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[SimRequest, int]] = []
        preempted: list[SimRequest] = []
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.total_tokens - req.num_computed, budget, self._prefill_cap())
            while not self.kv.can_allocate(req, n, []):
                victim = self.running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            else:
                self.kv.allocate(req, n, [])
                scheduled.append((req, n))
                budget -= n
                i += 1
        if not preempted:
            budget = self._admit(now, budget, scheduled)
        prefill = decode = ctx = 0
        for req, n in scheduled:
            ctx += req.num_computed + n
            if n == 1 and req.num_computed == req.total_tokens - 1 and req.num_output > 0:
                decode += 1
            else:
                prefill += n
        duration = cfg.step.step_seconds(
            prefill_tokens=prefill, decode_seqs=decode, context_tokens=ctx, slowdown=self.slowdown
        )
        num_preempted = len(preempted) + self._pending_preempted
        self._pending_preempted = 0
        return StepPlan(
            now, duration, scheduled, prefill, decode, num_preempted, preempted, context_tokens=ctx
        )

    def _prefill_cap(self) -> int:
        cap = self.config.long_prefill_token_threshold
        return cap if cap > 0 else 1 << 30

    def _admit(self, now: float, budget: int, scheduled: list[tuple[SimRequest, int]]) -> int:
        cfg = self.config
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting[0]
            hits = self.kv.lookup(req) if req.num_computed == 0 and not req.blocks else []
            hit_tokens = len(hits) * self.kv.block_size
            req.num_computed = hit_tokens
            n = min(req.total_tokens - hit_tokens, budget, self._prefill_cap())
            if not self.kv.can_allocate(req, n, hits):
                req.num_computed = 0
                break
            self.kv.allocate(req, n, hits)
            self._queries += len(req.prompt)
            self._hits += hit_tokens
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = hit_tokens
            self.waiting.popleft()
            req.state = ReqState.RUNNING
            self.running.append(req)
            if req.first_scheduled < 0:
                req.first_scheduled = now
            scheduled.append((req, n))
            budget -= n
        return budget

    def _preempt(self, req: SimRequest) -> None:
        self.kv.release(req)
        req.num_computed = 0
        req.num_preemptions += 1
        req.state = ReqState.WAITING
        self.waiting.appendleft(req)

    def commit(self, plan: StepPlan, end: float) -> StepResult:
        new_tokens: list[SimRequest] = []
        finished: list[FinishedStats] = []
        ttfts: list[float] = []
        itls: list[float] = []
        prompt_tokens = 0
        tokens_in_step = 0
        context = 0
        for req, n in plan.scheduled:
            if req.state != ReqState.RUNNING:
                continue  # aborted or preempted while the step ran
            tokens_in_step += n
            req.num_computed += n
            context += req.num_computed
            self.kv.cache_full_blocks(req)
            if req.num_computed < req.total_tokens:
                continue  # a chunk of prefill, no token yet
            req.num_output += 1
            new_tokens.append(req)
            if req.first_token < 0:
                req.first_token = end
                ttfts.append(end - req.arrival)
                prompt_tokens += len(req.prompt)
            else:
                itls.append(end - req.last_token)
            req.last_token = end
            if req.num_output >= req.target_output:
                finished.append(self._finish(req, req.stop_reason, end))
        queries, hits = self._queries, self._hits
        self._queries = self._hits = 0
        return StepResult(
            end=end,
            new_tokens=new_tokens,
            finished=finished,
            num_prompt_tokens=prompt_tokens,
            num_generation_tokens=len(new_tokens),
            num_preempted=plan.num_preempted,
            prefix_queries=queries,
            prefix_hits=hits,
            ttfts=ttfts,
            itls=itls,
            iteration_tokens=tokens_in_step,
            context_tokens=context,
        )

    def _finish(self, req: SimRequest, reason: FinishReason, end: float) -> FinishedStats:
        self.running.remove(req)
        self.kv.release(req)
        self.requests.pop(req.req_id, None)
        req.state = ReqState.FINISHED
        req.finish_reason = reason
        return FinishedStats(
            req_id=req.req_id,
            reason=reason,
            e2e=end - req.arrival,
            queued=req.first_scheduled - req.arrival,
            prefill=req.first_token - req.first_scheduled,
            decode=end - req.first_token,
            inference=end - req.first_scheduled,
            prompt_tokens=len(req.prompt),
            generation_tokens=req.num_output,
            max_tokens_param=req.max_tokens_param,
            prefill_kv_computed=len(req.prompt) - max(0, req.num_cached_tokens),
            num_preemptions=req.num_preemptions,
        )

    def fail_all(self) -> list[SimRequest]:
        """The engine died: every request ends with an error; returns them."""
        reqs = list(self.requests.values())
        for req in reqs:
            req.state = ReqState.FINISHED
            req.finish_reason = FinishReason.ERROR
        self.requests.clear()
        self.waiting.clear()
        self.running.clear()
        return reqs

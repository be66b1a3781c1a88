"""The engine model in virtual time: batching, chunked prefill, KV, preemption, prefix cache."""

from __future__ import annotations

from faultday_refstack.llmsim.config import SimConfig, StepModel
from faultday_refstack.llmsim.engine import Engine, FinishReason, SimRequest, StepResult


def make_engine(**kw: object) -> Engine:
    step = StepModel(
        base_ms=5, prefill_ms_per_token=0.1, decode_ms_per_seq=0.5, attention_ms_per_ktoken=0
    )
    return Engine(SimConfig.model_validate({"step": step.model_dump(), **kw}))


def req(
    i: int,
    prompt_len: int = 32,
    out: int = 10,
    arrival: float = 0.0,
    prefix: list[int] | None = None,
) -> SimRequest:
    head = list(prefix or [])
    prompt = head + [1000 + i * 7919 + k for k in range(prompt_len - len(head))]
    return SimRequest(f"r{i}", prompt, out, FinishReason.LENGTH, arrival)


def run(engine: Engine, *, until: float = 1e9) -> tuple[float, list[StepResult]]:
    t = 0.0
    results = []
    for _ in range(100_000):
        if not engine.has_work or t > until:
            break
        plan = engine.plan(t)
        t += plan.duration
        results.append(engine.commit(plan, t))
    return t, results


def test_continuous_batching_respects_max_num_seqs_and_step_model() -> None:
    e = make_engine(max_num_seqs=4)
    for i in range(10):
        e.add(req(i))
    plan = e.plan(0.0)
    assert len(plan.scheduled) == 4
    assert len(e.waiting) == 6
    # One prefill step of 4x32 tokens: base + 0.1 ms x 128.
    assert abs(plan.duration - (5 + 12.8) / 1000) < 1e-9
    e.commit(plan, plan.duration)
    decode = e.plan(plan.duration)
    assert decode.decode_seqs == 4
    assert decode.prefill_tokens == 0
    assert abs(decode.duration - (5 + 0.5 * 4) / 1000) < 1e-9
    _, results = run(e)
    finished = [f for r in results for f in r.finished]
    assert len(finished) == 10
    assert all(f.generation_tokens == 10 for f in finished)


def test_chunked_prefill_splits_long_prompts_by_token_budget() -> None:
    e = make_engine(max_num_batched_tokens=256)
    e.add(req(0, prompt_len=1000))
    steps_to_first_token = 0
    t = 0.0
    while True:
        plan = e.plan(t)
        assert sum(n for _, n in plan.scheduled) <= 256
        t += plan.duration
        steps_to_first_token += 1
        if e.commit(plan, t).new_tokens:
            break
    assert steps_to_first_token == 4  # ceil(1000 / 256)


def test_ttft_rises_with_queue_depth() -> None:
    def ttft_of_last(n: int) -> float:
        e = make_engine(max_num_seqs=4)
        for i in range(n):
            e.add(req(i, out=50))
        _, results = run(e)
        return max(v for r in results for v in r.ttfts)

    shallow, deep = ttft_of_last(4), ttft_of_last(16)
    assert deep > 3 * shallow  # the 16th waits for three generations of four


def test_preemption_by_recompute_when_kv_blocks_run_out() -> None:
    # 24 blocks of 16 tokens; 4 requests growing to 32+100 tokens need 9 blocks each.
    e = make_engine(num_gpu_blocks=24, block_size=16, max_num_seqs=8)
    for i in range(4):
        e.add(req(i, out=100))
    _, results = run(e)
    preempted = sum(r.num_preempted for r in results)
    finished = [f for r in results for f in r.finished]
    assert preempted > 0
    assert sorted(f.req_id for f in finished) == ["r0", "r1", "r2", "r3"]
    assert all(f.generation_tokens == 100 for f in finished)  # recompute loses no output


def test_kv_shrink_preempts_running_requests() -> None:
    e = make_engine(num_gpu_blocks=1000, block_size=16)
    for i in range(8):
        e.add(req(i, out=200))
    run(e, until=0.05)
    assert len(e.running) == 8
    assert e.kv.usage() > 0
    preempted = e.set_kv_capacity(20)
    assert preempted > 0
    assert e.kv.num_used <= 20
    assert e.plan(1.0).num_preempted >= preempted


def test_prefix_cache_hits_shared_prompt_blocks() -> None:
    e = make_engine(block_size=16)
    system = list(range(500, 564))  # 64 shared tokens = 4 full blocks
    e.add(req(0, prompt_len=80, prefix=system))
    run(e)
    e.add(req(1, prompt_len=80, prefix=system))
    plan = e.plan(10.0)
    assert plan.scheduled[0][1] == 80 - 64  # only the uncached tail is computed
    result = e.commit(plan, 10.0 + plan.duration)
    assert result.prefix_hits == 64
    assert result.prefix_queries == 80


def test_abort_frees_blocks() -> None:
    e = make_engine(num_gpu_blocks=100)
    e.add(req(0, out=100))
    run(e, until=0.05)
    assert e.kv.num_used > 0
    e.abort("r0")
    assert e.kv.num_used == 0
    assert not e.has_work


def test_throttle_slows_every_step() -> None:
    e = make_engine()
    e.add(req(0))
    normal = e.plan(0.0).duration
    e2 = make_engine()
    e2.slowdown = 3.0
    e2.add(req(0))
    assert abs(e2.plan(0.0).duration - 3 * normal) < 1e-12

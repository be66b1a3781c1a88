"""Recorded runs with GPU telemetry, built through the real writers.

Each replica's ``/metrics`` text is written in dcgm-exporter's and vLLM's exposition
format and parsed by the scraper's own parser (``observe.scrape.parse_metrics``);
the load's records go through ``observe.series.derived``; both are written by
``observe.series.write_csv``, and the journal by ``Journal.write``. A run has a
baseline (0-20 s), one fault (20-40 s) and a recovery (40-60 s), as
``tests/report/journals.py`` lays them out.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.report.journals import failed_journal

from faultday.core.journal import Journal, JournalCheck
from faultday.core.records import RequestRecord, Sample
from faultday.core.vocab import Section, Verdict
from faultday.observe.scrape import UP, parse_metrics
from faultday.observe.series import derived, write_csv

LABELS = (
    'gpu="0",UUID="GPU-5e1c0a52-8b9e-5c3e-9d1f-0a6b2c4d8e10",pci_bus_id="00000000:01:00.0",'
    'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",'
    'DCGM_FI_DRIVER_VERSION="570.133.20"'
)
FAULT = (20.0, 40.0)
END = 60.0


@dataclass(frozen=True)
class Gpu:
    """What one replica's GPU and engine do each second of a phase."""

    sm_clock: float = 1980.0
    power: float = 400.0
    temp: float = 65.0
    util: float = 80.0
    xid: int = 0
    fb_used: float = 40000.0
    fb_free: float = 40000.0
    thermal_ns: float = 0.0  # per second
    pcie_replays: float = 0.0  # per second
    tokens: float = 50.0  # per second
    prefix_hits: float = 40.0  # per second
    prefix_queries: float = 100.0  # per second
    preemptions: float = 0.0  # per second
    waiting: float = 0.0
    up: bool = True


@dataclass(frozen=True)
class Load:
    """What the clients see each second of a phase."""

    rps: int = 10
    error: float = 0.0
    fallback: float = 0.0
    e2e: float = 0.3
    tokens: int = 20


@dataclass(frozen=True)
class Agent:
    """The agent's, proxy's and tools' figures each second of a phase."""

    breaker_transitions: float = 0.0  # per second
    proxy_per_request: float = 1.0
    tool_queue: float = 0.0
    admission_rejected: float = 0.0  # per second


@dataclass(frozen=True)
class Phase:
    gpu: Gpu = field(default_factory=Gpu)
    load: Load = field(default_factory=Load)
    agent: Agent = field(default_factory=Agent)


@dataclass
class _Totals:
    values: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, amount: float) -> float:
        self.values[name] = self.values.get(name, 0.0) + amount
        return self.values[name]


def _gpu_text(g: Gpu, tot: _Totals) -> str:
    counters = {
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": tot.add("energy", g.power * 1e3),
        "DCGM_FI_DEV_THERMAL_VIOLATION": tot.add("thermal", g.thermal_ns),
        "DCGM_FI_DEV_POWER_VIOLATION": tot.add("power_v", 0.0),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": tot.add("replay", g.pcie_replays),
    }
    gauges = {
        "DCGM_FI_DEV_SM_CLOCK": g.sm_clock,
        "DCGM_FI_DEV_POWER_USAGE": g.power,
        "DCGM_FI_DEV_GPU_TEMP": g.temp,
        "DCGM_FI_DEV_GPU_UTIL": g.util,
        "DCGM_FI_DEV_FB_USED": g.fb_used,
        "DCGM_FI_DEV_FB_FREE": g.fb_free,
    }
    lines = []
    for name, v in counters.items():
        lines += [f"# TYPE {name} counter", f"{name}{{{LABELS}}} {int(v)}"]
    for name, v in gauges.items():
        lines += [f"# TYPE {name} gauge", f"{name}{{{LABELS}}} {v:f}"]
    lines += [
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
        f'DCGM_FI_DEV_XID_ERRORS{{{LABELS},err_code="{g.xid}",err_msg="x"}} {g.xid}',
    ]
    vllm = {
        "vllm:generation_tokens": tot.add("gen", g.tokens),
        "vllm:prefix_cache_hits": tot.add("hits", g.prefix_hits),
        "vllm:prefix_cache_queries": tot.add("queries", g.prefix_queries),
        "vllm:num_preemptions": tot.add("preempt", g.preemptions),
    }
    for name, v in vllm.items():
        lines += [f"# TYPE {name} counter", f'{name}_total{{model_name="m"}} {v}']
    lines += [
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{model_name="m"}} {g.waiting}',
    ]
    return "\n".join(lines) + "\n"


def _agent_text(a: Agent, tot: _Totals, clients: int) -> str:
    tr = tot.add("transitions", a.breaker_transitions)
    rej = tot.add("rejected", a.admission_rejected)
    prox = tot.add("proxy", a.proxy_per_request * clients)
    return (
        "# TYPE faultday_agent_breaker_transitions counter\n"
        "faultday_agent_breaker_transitions_total"
        f'{{dependency="llm-primary",state="opened"}} {tr}\n'
        "# TYPE faultday_agent_admission_rejected counter\n"
        f"faultday_agent_admission_rejected_total {rej}\n"
        "# TYPE faultday_proxy_http_requests counter\n"
        f'faultday_proxy_http_requests_total{{proxy="agent->llm-primary"}} {prox}\n'
        "# TYPE faultday_tools_queue_depth gauge\n"
        f"faultday_tools_queue_depth {a.tool_queue}\n"
    )


def _phase(t: float, base: Phase, fault: Phase) -> Phase:
    return fault if FAULT[0] <= t < FAULT[1] else base


def _requests(t: int, load: Load, rng: random.Random) -> list[RequestRecord]:
    out = []
    for i in range(load.rps):
        failed = rng.random() < load.error
        fell = not failed and rng.random() < load.fallback
        out.append(
            RequestRecord(
                t=t + i / load.rps,
                duration=load.e2e,
                ok=not failed,
                status=500 if failed else 200,
                ttft=load.e2e / 3,
                tokens=0 if failed else load.tokens,
                degraded=fell,
                reasons=("fallback:llm-backup",) if fell else (),
            )
        )
    return out


def samples(base: Phase, fault: Phase, *, replica: str = "llm-primary") -> list[Sample]:
    """One scrape a second of the replica and the agent, and the load's derived figures."""
    rng = random.Random(7)
    gpu_tot, agent_tot = _Totals(), _Totals()
    out: list[Sample] = []
    records: list[RequestRecord] = []
    for t in range(int(END)):
        ph = _phase(float(t), base, fault)
        reqs = _requests(t, ph.load, rng)
        records += reqs
        gpu_text = _gpu_text(ph.gpu, gpu_tot)  # the counters grow even while not scraped
        if ph.gpu.up:
            out += parse_metrics(gpu_text, t=float(t), component=replica)
        out.append(Sample(float(t), UP, 1.0 if ph.gpu.up else 0.0, (("component", replica),)))
        out += parse_metrics(
            _agent_text(ph.agent, agent_tot, len(reqs)), t=float(t), component="agent"
        )
    out += derived(records, interval=1.0, start=0.0, end=END)
    return out


def record_run(
    run_dir: Path,
    *,
    base: Phase | None = None,
    fault: Phase | None = None,
    checks: Iterable[JournalCheck] = (),
    errors: Iterable[str] = (),
    logs: dict[str, str] | None = None,
) -> Journal:
    """A finished run folder: journal.json, timeseries.csv and component logs."""
    base = base or Phase()
    fault = fault if fault is not None else base
    journal = failed_journal(run_dir)
    journal.checks = list(checks)
    journal.errors = list(errors)
    journal.write(run_dir)
    write_csv(run_dir / "timeseries.csv", samples(base, fault))
    for name, text in (logs or {}).items():
        (run_dir / "logs").mkdir(exist_ok=True)
        (run_dir / "logs" / f"{name}.log").write_text(text, encoding="utf-8")
    return journal


def check(name: str, verdict: Verdict, *, window: str = "during xid79") -> JournalCheck:
    """A judged check as the engine records it."""
    return JournalCheck(
        section=Section.EXPECT,
        check=name,
        label=f"{window}: {name}",
        window=window,
        verdict=verdict,
        expected="≥ 0.9",
        observed="0.42" if verdict != Verdict.PASSED else "0.97",
        n=50,
    )


def phase(**changes: object) -> Phase:
    """A phase whose GPU, load or agent differ from the healthy default by ``changes``.

    Keys name the part: ``gpu_sm_clock=660``, ``load_error=0.2``, ``agent_tool_queue=9``.
    """
    parts: dict[str, dict[str, object]] = {"gpu": {}, "load": {}, "agent": {}}
    for key, value in changes.items():
        part, _, name = key.partition("_")
        parts[part][name] = value
    return Phase(
        gpu=replace(Gpu(), **parts["gpu"]),  # type: ignore[arg-type]
        load=replace(Load(), **parts["load"]),  # type: ignore[arg-type]
        agent=replace(Agent(), **parts["agent"]),  # type: ignore[arg-type]
    )

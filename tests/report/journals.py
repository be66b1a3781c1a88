"""Journals built programmatically, as the engine writes them, for report tests."""

from __future__ import annotations

import random
import time
from pathlib import Path

from faultday.core.journal import (
    Journal,
    JournalCheck,
    JournalEvent,
    JournalFault,
    JournalWindow,
    RunVerdict,
)
from faultday.core.records import RequestRecord
from faultday.core.vocab import WindowKind
from faultday.observe.series import derived, write_csv

XSS = "<script>document.title='pwned';console.error('xss ran')</script><img src=x onerror=alert(1)>"


def _scenario(name: str, *, runbook: str = "gpu-loss") -> dict:
    return {
        "apiVersion": "faultday/v1",
        "kind": "Scenario",
        "metadata": {
            "name": name,
            "title": f"{name} title",
            "description": "",
            "tags": ["gpu"],
            "runbook": runbook,
            "severity": "SEV2",
        },
        "spec": {
            "stack": "local",
            "policy": None,
            "duration": 60.0,
            "warmup": 2.0,
            "recovery": 10.0,
            "load": {"workload": "chat", "users": 8},
            "steady_state": [
                {
                    "check": "error_rate",
                    "name": None,
                    "during": None,
                    "after": None,
                    "anytime": False,
                    "for": None,
                    "params": {"max": 0.01},
                }
            ],
            "faults": [
                {
                    "name": "xid79",
                    "inject": "gpu_loss",
                    "target": "llm-primary",
                    "at": 20.0,
                    "duration": 20.0,
                    "with": {"xid": 79},
                }
            ],
            "expect": [
                {
                    "check": "fallback_rate",
                    "name": None,
                    "during": "xid79",
                    "after": None,
                    "anytime": False,
                    "for": None,
                    "params": {"min": 0.95},
                },
                {
                    "check": "recovery_time",
                    "name": None,
                    "during": None,
                    "after": "xid79",
                    "anytime": False,
                    "for": None,
                    "params": {"max": 20.0},
                },
                {
                    "check": "retry_amplification",
                    "name": None,
                    "during": "xid79",
                    "after": None,
                    "anytime": False,
                    "for": None,
                    "params": {"target": "agent->tools", "max": 1.5},
                },
            ],
            "abort": [
                {
                    "check": "error_rate",
                    "name": None,
                    "during": None,
                    "after": None,
                    "anytime": False,
                    "for": 5.0,
                    "params": {"max": 0.5},
                }
            ],
        },
    }


def _base(run_dir: Path, name: str, *, started: float) -> Journal:
    t0 = started + 2.0
    ev = [
        JournalEvent(t=0.0, wall=t0, kind="phase", message="baseline"),
        JournalEvent(
            t=20.0,
            wall=t0 + 20,
            kind="fault.injected",
            message="gpu_loss on llm-primary",
            fault="xid79",
            target="llm-primary",
            data={"injector": "gpu_loss"},
        ),
        JournalEvent(
            t=20.4,
            wall=t0 + 20.4,
            kind="breaker.open",
            message="llm-primary breaker open",
            target="llm-primary",
            data={"failures": 3},
        ),
        JournalEvent(
            t=23.1, wall=t0 + 23.1, kind="breaker.half_open", message="probe", target="llm-primary"
        ),
        JournalEvent(
            t=24.0,
            wall=t0 + 24,
            kind="sample.answer",
            message="a model answer",
            target="agent",
            data={"answer": XSS},
        ),
    ]
    return Journal(
        faultday_version="0.1.0",
        run_id=run_dir.name,
        run_dir=str(run_dir),
        scenario_file="scenarios/x.scenario.yaml",
        scenario=_scenario(name),
        title=f"{name} title",
        severity="SEV2",
        runbook="gpu-loss",
        tags=["gpu"],
        stack_profile="local",
        stack={
            "profile": "local",
            "source": "stack/local.yaml",
            "run_dir": str(run_dir),
            "policy": "default",
            "components": [
                {"name": n, "type": t}
                for n, t in (
                    ("llm-primary", "llmsim"),
                    ("llm-backup", "llmsim"),
                    ("agent", "agent"),
                    ("qdrant", "qdrant"),
                    ("redis", "redis"),
                    ("tools", "tools"),
                )
            ],
            "edges": [{"name": "agent->llm-primary"}, {"name": "agent->tools"}],
        },
        components={"llm-primary": "llmsim 0.1.0", "agent": "faultday-agent 0.1.0"},
        duration=60.0,
        started=started,
        t0_wall=t0,
        windows=[
            # The windows make_plan() writes for this scenario (test_charts.py keeps them equal).
            JournalWindow(kind=WindowKind.RUN, label="whole run", start=0, end=60),
            JournalWindow(kind=WindowKind.BASELINE, label="baseline", start=0, end=20),
            JournalWindow(kind=WindowKind.RECOVERED, label="after recovery", start=50, end=60),
            JournalWindow(
                kind=WindowKind.FAULT, label="during xid79", start=20, end=40, fault="xid79"
            ),
            JournalWindow(
                kind=WindowKind.AFTER, label="after xid79", start=40, end=60, fault="xid79"
            ),
        ],
        events=ev,
    )


def write_series(run_dir: Path, *, until: float = 60.0, seed: int = 1) -> None:
    """A realistic timeseries.csv through the real writer: errors and fallbacks during 20–40 s."""
    rng = random.Random(seed)
    recs = []
    t = 0.0
    while t < until:
        in_fault = 20.0 <= t < 40.0
        fail = in_fault and rng.random() < 0.15
        degraded = in_fault and not fail and rng.random() < 0.8
        recs.append(
            RequestRecord(
                t=t,
                duration=rng.uniform(0.2, 0.5) * (3 if in_fault else 1),
                ok=not fail,
                status=500 if fail else 200,
                ttft=rng.uniform(0.05, 0.15) * (4 if in_fault else 1),
                degraded=degraded,
                reasons=("fallback:llm-backup",) if degraded else (),
            )
        )
        t += 0.1
    write_csv(run_dir / "timeseries.csv", derived(recs, interval=1.0, start=0.0, end=until))


def failed_journal(
    run_dir: Path, *, started: float | None = None, amplification: str = "7.3"
) -> Journal:
    """A finished run whose fallback and retry checks failed."""
    run_dir.mkdir(parents=True, exist_ok=True)
    started = started or time.time() - 70
    j = _base(run_dir, "gpu-loss-primary", started=started)
    j.events += [
        JournalEvent(
            t=40.0,
            wall=started + 42,
            kind="fault.reverted",
            message="gpu_loss on llm-primary",
            fault="xid79",
            target="llm-primary",
        ),
        JournalEvent(t=60.0, wall=started + 62, kind="phase", message="checks"),
    ]
    j.faults = [
        JournalFault(
            name="xid79",
            inject="gpu_loss",
            target="llm-primary",
            at=20,
            duration=20,
            params={"xid": 79},
            injected_at=20.0,
            reverted_at=40.0,
            revert_ok=True,
        )
    ]
    j.checks = [
        JournalCheck(
            section="steady_state",
            check="error_rate",
            label="error_rate",
            window="baseline",
            verdict="passed",
            expected="≤ 1.0%",
            observed="0.0%",
            n=200,
            params={"max": 0.01},
        ),
        JournalCheck(
            section="expect",
            check="fallback_rate",
            label="during xid79: fallback_rate",
            window="during xid79",
            verdict="failed",
            expected="≥ 95.0%",
            observed="80.2%",
            n=200,
            params={"min": 0.95},
        ),
        JournalCheck(
            section="expect",
            check="recovery_time",
            label="after xid79: recovery_time",
            window="after xid79",
            verdict="passed",
            expected="≤ 20s",
            observed="4.2s",
            n=1,
            params={"max": 20.0},
        ),
        JournalCheck(
            section="expect",
            check="retry_amplification",
            label="during xid79: retry_amplification",
            window="during xid79",
            verdict="failed",
            expected="≤ 1.5×",
            observed=f"{amplification}×",
            n=180,
            params={"target": "agent->tools", "max": 1.5},
        ),
    ]
    j.verdict = RunVerdict.FAILED
    j.reason = "2 of 4 checks did not pass"
    j.ended = started + 64
    j.write(run_dir)
    return j


def aborted_journal(run_dir: Path, *, started: float | None = None) -> Journal:
    """A run stopped by its abort condition mid-fault; reverts ran, later checks never judged."""
    run_dir.mkdir(parents=True, exist_ok=True)
    started = started or time.time() - 40
    j = _base(run_dir, "gpu-loss-naive", started=started)
    j.events += [
        JournalEvent(
            t=27.0,
            wall=started + 29,
            kind="abort",
            message="abort condition tripped: error_rate 62.0% > 50.0%",
        ),
        JournalEvent(
            t=27.1,
            wall=started + 29.1,
            kind="fault.reverted",
            message="gpu_loss on llm-primary",
            fault="xid79",
            target="llm-primary",
        ),
    ]
    j.faults = [
        JournalFault(
            name="xid79",
            inject="gpu_loss",
            target="llm-primary",
            at=20,
            duration=20,
            params={"xid": 79},
            injected_at=20.0,
            reverted_at=27.1,
            revert_ok=True,
        )
    ]
    j.checks = [
        JournalCheck(
            section="abort",
            check="error_rate",
            label="error_rate",
            window="last 5s",
            verdict="failed",
            expected="≤ 50.0%",
            observed="62.0%",
            n=40,
            params={"max": 0.5},
        )
    ]
    j.verdict = RunVerdict.ABORTED
    j.reason = "abort condition tripped: error_rate 62.0% > 50.0%"
    j.ended = started + 31
    j.write(run_dir)
    return j

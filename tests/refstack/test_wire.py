"""What the harness and the reference stack must spell alike, checked side by side.

The services take the fault-admin bodies and metric names from faultday_wire;
where the harness still keeps its own copy (a check's metric name, the lint's
timeout names), these tests keep the copies equal.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from faultday.checks import agent as agent_checks
from faultday.checks import metrics as metric_checks
from faultday.checks import requests as request_checks
from faultday.checks.lint import DEPENDENCIES
from faultday.core import durations as harness_durations
from faultday.errors import InjectionError
from faultday.injectors.gpu import GpuThrottle, KvPressure
from faultday.injectors.tools import fault_body
from faultday_wire import durations as wire_durations
from faultday_wire.admin import FaultKind
from faultday_wire.durations import Duration as WireDuration
from faultday_wire.metrics import (
    AGENT_BREAKER_STATE,
    AGENT_BREAKER_TRANSITIONS,
    AGENT_TOOL_CALLS,
    BREAKER_HALF_OPEN,
    BREAKER_STATES,
    VLLM_QUEUE_TIME,
    total,
)
from faultday_wire.policy import Timeouts

REPO = Path(__file__).parents[2]


def test_checks_read_the_names_the_agent_exports() -> None:
    assert metric_checks.BREAKER_METRIC == AGENT_BREAKER_STATE
    assert total(AGENT_BREAKER_TRANSITIONS) == metric_checks.BREAKER_TRANSITIONS
    assert total(AGENT_TOOL_CALLS) == agent_checks.TOOL_CALLS
    assert request_checks.QUEUE_METRIC == VLLM_QUEUE_TIME
    # The breaker check reads 2 as open, 1 as half-open, 0 as closed.
    assert sorted(BREAKER_STATES.values()) == [0, 1, 2]
    assert BREAKER_STATES[BREAKER_HALF_OPEN] == 1


def test_simulator_fault_kinds_the_injectors_post_exist() -> None:
    assert {GpuThrottle.kind, KvPressure.kind} <= {k.value for k in FaultKind}


def test_tool_fault_body_is_the_servers_model_as_sent() -> None:
    # Only the fields given go on the wire, an explicit null included (null = every tool).
    body = fault_body(tools=None, concurrency=0, queue=0, error_rate=0.5)
    assert body == {"tools": None, "concurrency": 0, "queue": 0, "error_rate": 0.5}
    assert fault_body(tools=["search_docs"], latency_s=1.5) == {
        "tools": ["search_docs"],
        "latency_s": 1.5,
    }
    # What the server would answer 422 to fails before anything is recorded.
    with pytest.raises(InjectionError, match="latency_s"):
        fault_body(latency_s=601.0)
    with pytest.raises(InjectionError, match="extra"):
        fault_body(latency=1.0)


def test_lint_knows_the_agents_timeouts() -> None:
    # `faultday lint` reads the policy with the agent's model and names its timeouts so.
    used = {name for pair in DEPENDENCIES.values() for name in pair}
    assert used <= set(Timeouts.model_fields)


def test_one_duration_grammar_for_both_sides() -> None:
    # The harness reads its durations with the wire's grammar: one parser, one set of words.
    assert harness_durations.parse_duration is wire_durations.parse_duration
    assert harness_durations.PATTERN is wire_durations.PATTERN


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-2s", "'-2s' is negative; a duration is 0 or more"),
        ("1e9s", "'1e9s' is too large: the maximum is 24h"),
        ("25h", "'25h' is too large: the maximum is 24h"),
        (2, "2 has no unit; write it as e.g. '2s' or '2ms'"),
        (float("nan"), "nan is not a number"),
        ("2 parsecs", "unit 'parsecs' is not one of us, ms, s, m or h"),
    ],
)
def test_the_agents_durations_say_what_the_harness_says(value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        TypeAdapter(WireDuration).validate_python(value)


def test_agent_reports_a_bad_policy_file_with_its_position(tmp_path: Path) -> None:
    text = (REPO / "stack" / "agent.yaml").read_text()
    bad = tmp_path / "agent.yaml"
    bad.write_text(text.replace("model_call: 2s,", "model_call: 2,", 1))
    line = next(i for i, x in enumerate(bad.read_text().splitlines(), 1) if "model_call: 2," in x)
    urls = [f"--{n}=http://127.0.0.1:9" for n in ("redis", "llm-primary", "llm-backup")]
    urls += [f"--{n}=http://127.0.0.1:9" for n in ("embedder", "qdrant", "tools")]
    proc = subprocess.run(
        [sys.executable, "-m", "faultday_refstack.agent", "--config", str(bad), *urls],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert f"{bad}:{line}:" in proc.stderr
    assert "policies.default.timeouts.model_call: 2 has no unit" in proc.stderr

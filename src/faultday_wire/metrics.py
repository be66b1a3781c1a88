"""Metric names the reference stack exports and the harness's checks read.

Counters are named here as the service registers them; Prometheus exposes a
counter ``x`` as ``x_total``, which is what a scrape (and so a check) sees:
use :func:`total` on the harness's side.
"""

from __future__ import annotations

from typing import Final

AGENT_PREFIX: Final = "faultday_agent"

# Gauge per dependency, valued by BREAKER_STATES.
AGENT_BREAKER_STATE: Final = f"{AGENT_PREFIX}_breaker_state"
# Counter per dependency and state: a half-open probe lasts milliseconds and a scrape
# rarely sees it in the gauge, so every transition is counted.
AGENT_BREAKER_TRANSITIONS: Final = f"{AGENT_PREFIX}_breaker_transitions"
# Counter per tool and result; the audit check compares it with the audit log.
AGENT_TOOL_CALLS: Final = f"{AGENT_PREFIX}_tool_calls"

# The breaker states (purgatory's names, the transition counter's "state" label) and
# the gauge's value for each.
BREAKER_CLOSED: Final = "closed"
BREAKER_HALF_OPEN: Final = "half-opened"
BREAKER_OPEN: Final = "opened"
BREAKER_STATES: Final = {BREAKER_CLOSED: 0, BREAKER_HALF_OPEN: 1, BREAKER_OPEN: 2}

# vLLM's own name, which the simulator exports too: queue time per request (histogram).
VLLM_QUEUE_TIME: Final = "vllm:request_queue_time_seconds"


def total(counter: str) -> str:
    """The sample name a scrape shows for ``counter``."""
    return f"{counter}_total"

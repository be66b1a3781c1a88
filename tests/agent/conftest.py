"""Fixtures for agent-runtime tests: a real stack (redis-server, two llmsims, tool server).

The embedder and the Qdrant front are not started here: tests that need RAG
point those URLs at a closed port, which is exactly the retrieval outage the
fallback chain must absorb.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from procs import Proc, Procs, dead_url


@dataclass
class Stack:
    procs: Procs
    redis: Proc
    redis_url: str
    primary: Proc
    primary_url: str
    backup: Proc
    backup_url: str
    tools: Proc
    tools_url: str

    def urls(self) -> dict[str, str]:
        return {
            "redis": self.redis_url,
            "llm-primary": self.primary_url,
            "llm-backup": self.backup_url,
            "embedder": dead_url(),
            "qdrant": dead_url(),
            "tools": self.tools_url,
        }


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def stack(procs: Procs) -> Stack:
    pytest.importorskip("faultday_refstack.llmsim")
    r, r_url = procs.redis()
    pr, pr_url = procs.llmsim("sim-primary", "--keep-alive-on-engine-death")
    bk, bk_url = procs.llmsim("sim-backup")
    tl, tl_url = procs.tools()
    return Stack(procs, r, r_url, pr, pr_url, bk, bk_url, tl, tl_url)

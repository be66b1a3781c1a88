"""Restart policies on a clean exit: what real vLLM does after its GPU dies (exit status 0)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable

import httpx
import pytest

from faultday.stack.stack import Stack
from faultday.stack.supervisor import ProcState

MakeStack = Callable[..., Stack]

# Serves HTTP; SIGUSR1 makes it exit 0 by itself, like vLLM's API server after engine death.
EXITS_CLEANLY = (
    "import os, signal, sys, http.server as h; "
    "signal.signal(signal.SIGUSR1, lambda *_: os._exit(0)); "
    "h.test(HandlerClass=h.SimpleHTTPRequestHandler, port=int(sys.argv[1]), bind='127.0.0.1')"
)


def _profile(policy: str) -> str:
    return f"""\
spec:
  proxy: null
  components:
    a:
      command: ["{{python}}", "-c", {json.dumps(EXITS_CLEANLY)}, "{{port}}"]
      ready: {{kind: http}}
      restart: {{policy: "{policy}", backoff: 100ms}}
"""


def _clean_exit(s: Stack) -> int:
    pid = s.target("a").pid
    assert pid is not None
    os.kill(pid, signal.SIGUSR1)
    return pid


def _wait_state(s: Stack, want: set[ProcState], timeout: float = 10.0) -> ProcState:
    deadline = time.monotonic() + timeout
    m = s.supervisor.managed("a")
    assert m is not None
    while m.state not in want and time.monotonic() < deadline:
        time.sleep(0.05)
    return m.state


def test_always_restarts_after_exit_status_0(make_stack: MakeStack) -> None:
    s = make_stack(_profile("always"))
    s.up(timeout=20)
    url = s.endpoints()["a"]
    old = _clean_exit(s)
    deadline = time.monotonic() + 15
    new = old
    while time.monotonic() < deadline:
        new = s.target("a").pid or old
        if new != old:
            try:
                if httpx.get(url + "/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    assert new != old
    assert httpx.get(url + "/", timeout=2).status_code == 200  # same port as before
    m = s.supervisor.managed("a")
    assert m is not None
    assert m.last_exit == 0
    assert m.restarts == 1
    # A stop we ask for is not an exit to restart from.
    s.supervisor.stop("a")
    time.sleep(0.5)
    assert m.state == ProcState.STOPPED
    assert m.restarts == 1


@pytest.mark.parametrize("policy", ["on-failure", "no"])
def test_other_policies_leave_a_clean_exit_down(make_stack: MakeStack, policy: str) -> None:
    s = make_stack(_profile(policy))
    s.up(timeout=20)
    _clean_exit(s)
    assert _wait_state(s, {ProcState.EXITED, ProcState.RESTARTING}) == ProcState.EXITED
    time.sleep(0.5)
    m = s.supervisor.managed("a")
    assert m is not None
    assert (m.state, m.last_exit, m.restarts) == (ProcState.EXITED, 0, 0)

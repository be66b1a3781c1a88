"""The process driver on plain commands: order, readiness errors, restarts, pause, recover."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest
from tests.stack.conftest import marked_processes

from faultday.core.ledger import Ledger, ProcessRecord
from faultday.core.targets import TargetKind
from faultday.errors import StackError
from faultday.stack import supervisor
from faultday.stack.stack import Stack, stop_recorded_processes

MakeStack = Callable[..., Stack]

SAYS_A = (
    "import sys, http.server as h; print('a is', sys.argv[1], flush=True); "
    "h.test(HandlerClass=h.SimpleHTTPRequestHandler, port=int(sys.argv[2]), bind='127.0.0.1')"
)
BOOM = "print('loading weights'); print('boom: no GPU', flush=True); import time; time.sleep(60)"
STUBBORN = (
    "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print('up', flush=True); time.sleep(60)"
)

WEB = (
    '{command: ["{python}", "-m", "http.server", "--bind", "{host}", "{port}"],'
    " ready: {kind: http, path: /}}"
)

TWO_WEBS = f"""\
spec:
  proxy: null
  components:
    a: {WEB}
    b:
      command: ["{{python}}", "-c", {json.dumps(SAYS_A)}, "{{url:a}}", "{{port}}"]
      ready: {{kind: http}}
"""


def test_up_starts_in_order_passes_urls_and_records_the_ledger(make_stack: MakeStack) -> None:
    s = make_stack(TWO_WEBS)
    s.up(timeout=20)
    urls = s.endpoints()
    assert httpx.get(urls["a"] + "/", timeout=2).status_code == 200
    assert httpx.get(urls["b"] + "/", timeout=2).status_code == 200
    assert f"a is {urls['a']}" in (s.run_dir / "logs" / "b.log").read_text()
    info = s.describe()
    assert {c.name: c.health for c in info.components} == {"a": "ready", "b": "ready"}
    pids = {c.pid for c in info.components}
    recorded = {r.pid for r in s.ledger.outstanding_processes()}
    assert pids == recorded
    for pid in pids:
        assert pid is not None
        assert os.getpgid(pid) == pid  # its own process group
    t = s.target("b")
    assert t.kind == TargetKind.COMPONENT
    assert t.url == urls["b"]
    assert t.pid in pids
    s.down()
    assert s.ledger.outstanding_processes() == []
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids if p
    )
    s.down()  # idempotent


def test_a_plan_never_hands_out_one_port_twice(
    make_stack: MakeStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each planned port is still free until its process binds it, so a second draw of the
    same number passed the old bind test: then two components planned one port and the
    second died with "address already in use" (CI, one stack start in ~150)."""
    same = supervisor.free_port()  # the random draw now always lands here
    monkeypatch.setattr(supervisor._RNG, "randint", lambda _lo, _hi: same)
    s = make_stack(TWO_WEBS)
    s.up(timeout=20)
    urls = s.endpoints()
    ports = {c: int(u.rsplit(":", 1)[1]) for c, u in urls.items()}
    assert ports["a"] == same and ports["b"] != same, ports
    assert httpx.get(urls["b"] + "/", timeout=2).status_code == 200


def test_unknown_target_suggests_the_closest_name(make_stack: MakeStack) -> None:
    s = make_stack(TWO_WEBS)
    assert s.target_names() == ["a", "b"]
    s.up(timeout=20)
    with pytest.raises(StackError, match="did you mean 'b'"):
        s.target("bb")


def test_failing_readiness_names_component_log_and_tail_and_stops_the_rest(
    make_stack: MakeStack,
) -> None:
    s = make_stack(
        f"""\
        spec:
          proxy: null
          components:
            a: {WEB}
            bad:
              command: ["{{python}}", "-c", {json.dumps(BOOM)}]
              ready: {{kind: tcp, timeout: 1s}}
            c:
              command: ["{{python}}", "-c", "import time; time.sleep(60)"]
              depends_on: [bad]
              ready: {{kind: none}}
        """
    )
    with pytest.raises(StackError) as info:
        s.up(timeout=20)
    msg = str(info.value)
    assert "component 'bad' not ready after 1s" in msg
    assert str(s.run_dir / "logs" / "bad.log") in msg
    assert "boom: no GPU" in msg
    assert s.ledger.outstanding_processes() == []
    assert marked_processes(s.run_dir) == []
    assert not (s.run_dir / "logs" / "c.log").exists()  # never started


def test_a_component_that_exits_early_fails_fast(make_stack: MakeStack) -> None:
    s = make_stack(
        """\
        spec:
          proxy: null
          components:
            crash:
              command: ["{python}", "-c", "import sys; sys.exit('config error: bad')"]
              ready: {kind: tcp, timeout: 30s}
        """
    )
    t0 = time.monotonic()
    with pytest.raises(
        StackError, match=r"(?s)exited with code 1 before it was ready.*config error"
    ):
        s.up(timeout=30)
    assert time.monotonic() - t0 < 5


def test_on_failure_restart_with_backoff_keeps_the_port(make_stack: MakeStack) -> None:
    s = make_stack(
        """\
        spec:
          proxy: null
          components:
            a:
              command: ["{python}", "-m", "http.server", "--bind", "{host}", "{port}"]
              ready: {kind: http}
              restart: {policy: on-failure, backoff: 100ms}
        """
    )
    s.up(timeout=20)
    url = s.endpoints()["a"]
    pid = s.target("a").pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    new_pid = pid
    while time.monotonic() < deadline:
        new_pid = s.target("a").pid or pid
        if new_pid != pid:
            try:
                if httpx.get(url + "/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    assert new_pid != pid
    assert httpx.get(url + "/", timeout=2).status_code == 200
    assert s.describe().components[0].restarts == 1
    # The killed one is recorded as stopped; only the new one is outstanding.
    assert [r.pid for r in s.ledger.outstanding_processes()] == [new_pid]


def test_no_restart_policy_leaves_it_exited(make_stack: MakeStack) -> None:
    s = make_stack(TWO_WEBS)
    s.up(timeout=20)
    pid = s.target("a").pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    assert s.describe().components[0].health == "exited"
    s.restart("a", timeout=10)
    assert s.target("a").pid != pid
    assert httpx.get(s.endpoints()["a"] + "/", timeout=2).status_code == 200


def test_pause_and_resume_stop_and_continue_the_group(make_stack: MakeStack) -> None:
    s = make_stack(TWO_WEBS)
    s.up(timeout=20)
    pid = s.target("a").pid
    assert pid is not None
    s.pause("a")
    assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
    assert {c.name: c.health for c in s.describe().components}["a"] == "paused"
    with pytest.raises(httpx.TimeoutException):
        httpx.get(s.endpoints()["a"] + "/", timeout=0.5)
    s.resume("a")
    assert httpx.get(s.endpoints()["a"] + "/", timeout=2).status_code == 200
    s.pause("a")
    t0 = time.monotonic()
    s.down()  # a paused component still stops promptly
    assert time.monotonic() - t0 < 3


def test_down_kills_helpers_in_the_group_and_escalates_to_sigkill(make_stack: MakeStack) -> None:
    s = make_stack(
        f"""\
        spec:
          proxy: null
          components:
            stubborn:
              # Ignores SIGTERM and leaves a helper (grandchild) in its group.
              command: ["{{python}}", "-c", {json.dumps(STUBBORN)}]
              ready: {{kind: none}}
              stop_grace: 500ms
        """
    )
    s.up(timeout=20)
    deadline = time.monotonic() + 5
    while len(marked_processes(s.run_dir)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(marked_processes(s.run_dir)) == 2
    t0 = time.monotonic()
    s.down()
    assert time.monotonic() - t0 < 3
    assert marked_processes(s.run_dir) == []


def test_stop_recorded_processes_stops_what_a_dead_harness_left(tmp_path: Path) -> None:
    ledger = Ledger.in_dir(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        ct = psutil.Process(child.pid).create_time()
        ledger.add_process(ProcessRecord("orphan", child.pid, child.pid, ct))
        # A record whose PID now belongs to someone else (create time differs): left alone.
        ledger.add_process(ProcessRecord("recycled", os.getpid(), os.getpid(), ct - 1000))
        msgs = stop_recorded_processes(ledger)
        assert any("orphan" in m and "stopped" in m for m in msgs), msgs
        assert any("recycled" in m and "left alone" in m for m in msgs), msgs
        assert child.wait(timeout=5) is not None
        assert ledger.outstanding_processes() == []
        assert stop_recorded_processes(ledger) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

"""kubectl's 'Forwarding from' line is read from a real child process's pipe."""

from __future__ import annotations

import subprocess
import sys

from faultday.cluster.kubernetes import _read_forward_port


def _child(script: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def test_the_port_is_read_even_when_the_line_arrives_in_pieces() -> None:
    proc = _child(
        "import sys, time\n"
        "sys.stdout.write('Forwarding from 127.0'); sys.stdout.flush(); time.sleep(0.3)\n"
        "sys.stdout.write('.0.1:43127 -> 8080\\n'); sys.stdout.flush(); time.sleep(30)\n"
    )
    try:
        assert _read_forward_port(proc, timeout=10) == 43127
    finally:
        proc.kill()
        proc.wait()


def test_a_child_that_exits_without_the_line_gives_none() -> None:
    proc = _child("print('error: pod not found')")
    try:
        assert _read_forward_port(proc, timeout=10) is None
    finally:
        proc.kill()
        proc.wait()

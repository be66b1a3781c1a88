"""The embedder's readiness poll survives a tritonserver that closes connections while it starts."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from pytriton.client.exceptions import PyTritonClientTimeoutError
from tritonclient.http import InferenceServerClient

from faultday_refstack.embedder.__main__ import _wait_for_server_ready


@pytest.fixture
def closing_server() -> Iterator[tuple[int, list[int]]]:
    """A real listener on 127.0.0.1 that accepts each connection and closes it unanswered."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.1)
    accepted = [0]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.recv(4096)
            conn.close()
            accepted[0] += 1

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1], accepted
    finally:
        stop.set()
        t.join(5)
        srv.close()


def test_a_connection_closed_before_the_answer_is_polled_again(
    closing_server: tuple[int, list[int]],
) -> None:
    port, accepted = closing_server
    client = InferenceServerClient(f"127.0.0.1:{port}", network_timeout=2.0)
    try:
        # Before the fix the first closed connection escaped as HTTPConnectionClosed and the
        # embedder died; now it keeps polling until its own deadline.
        with pytest.raises(PyTritonClientTimeoutError):
            _wait_for_server_ready(client, timeout_s=0.5)
    finally:
        client.close()
    assert accepted[0] >= 2, "polled more than once"

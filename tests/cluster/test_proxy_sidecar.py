"""The proxy injectors on Kubernetes go through each destination's Toxiproxy sidecar.

No cluster can run here; the sidecar is faultday's own Toxiproxy-API proxy run
on 127.0.0.1 with the very toxiproxy.json the k8s renderer puts in the sidecar's
ConfigMap (only its addresses moved to loopback). The network injector
``latency`` gets its target from KubernetesStack.target(edge) and must slow
real bytes crossing that edge; its revert must make them fast again.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kube_standin import KubeStandIn

from conftest import Ctx, engine_inject, k8s_config
from faultday.cluster.kubernetes import KubernetesStack
from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile
from faultday.injectors.base import injector_registry


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def echo() -> Iterator[int]:
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        t.join(timeout=2)
        srv.close()


def _rtt(port: int) -> float:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        t0 = time.monotonic()
        c.sendall(b"ping")
        assert c.recv(16) == b"ping"
        return time.monotonic() - t0


def test_latency_through_the_qdrant_sidecar(
    standin: KubeStandIn, profile: StackProfile, tmp_path: Path, echo: int
) -> None:
    api_port = _free_port()
    stack = KubernetesStack(
        profile,
        run_dir=tmp_path,
        ledger=Ledger.in_dir(tmp_path),
        config=k8s_config(standin, proxy_overrides={"qdrant": f"http://127.0.0.1:{api_port}"}),
    )
    cm = next(d for d in stack.manifests() if d["metadata"]["name"] == "qdrant-toxiproxy")
    proxies = json.loads(cm["data"]["toxiproxy.json"])
    assert [p["name"] for p in proxies] == ["agent_to_qdrant"]
    edge_port = _free_port()
    proxies[0].update(listen=f"127.0.0.1:{edge_port}", upstream=f"127.0.0.1:{echo}")
    cfg = tmp_path / "toxiproxy.json"
    cfg.write_text(json.dumps(proxies))
    log = (tmp_path / "sidecar.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultday.proxy", "--port", str(api_port), "--config", str(cfg)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{api_port}/version", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "sidecar stand-in did not start"
            time.sleep(0.1)
        target = stack.target("agent->qdrant")
        assert target.proxy_api == f"http://127.0.0.1:{api_port}"
        assert target.proxy_name == "agent_to_qdrant"
        assert _rtt(edge_port) < 0.15
        latency = injector_registry().get("latency")()
        ctx = Ctx(run_dir=tmp_path, stack=stack)
        revert = engine_inject(latency, ctx, "agent->qdrant", {"latency": "300ms"})
        assert _rtt(edge_port) >= 0.28
        latency.revert(ctx, revert)
        assert _rtt(edge_port) < 0.15
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()
        stack.cluster.close()

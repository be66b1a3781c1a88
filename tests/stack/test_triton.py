"""KServe v2 inference against the real tritonserver (PyTriton) with tritonclient."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.http as tc
from tests.stack.conftest import REPO, marked_processes

from faultday.core.ledger import Ledger
from faultday.core.profile import load_profile
from faultday.stack.stack import Stack
from faultday_refstack.embedder.hashing import embed


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    run_dir = tmp_path_factory.mktemp("triton")
    s = Stack(
        load_profile("local", base_dir=REPO).subset(["triton"]),
        run_dir=run_dir,
        ledger=Ledger.in_dir(run_dir),
    )
    try:
        s.up(timeout=90)
        yield s
    finally:
        t0 = time.monotonic()
        s.down()
        # ~1 s idle; PyTriton's orderly shutdown stretches on a loaded 2-core box.
        assert time.monotonic() - t0 < 8
        assert marked_processes(run_dir) == []


def test_kserve_v2_inference_with_tritonclient(triton: Stack) -> None:
    url = triton.endpoints()["triton"].removeprefix("http://")
    client = tc.InferenceServerClient(url=url, connection_timeout=10, network_timeout=10)
    try:
        assert client.is_server_ready()
        assert client.is_model_ready("embedder")
        meta = client.get_model_metadata("embedder")
        assert meta["inputs"][0]["name"] == "TEXT"
        assert meta["outputs"][0] == {"name": "EMBEDDING", "datatype": "FP32", "shape": [-1, 384]}
        texts = ["GPU fell off the bus", "redis outage", "GPU fell off the bus"]
        inp = tc.InferInput("TEXT", [len(texts), 1], "BYTES")
        inp.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=object))
        res = client.infer("embedder", [inp], outputs=[tc.InferRequestedOutput("EMBEDDING")])
        out = res.as_numpy("EMBEDDING")
    finally:
        client.close()
    assert out.shape == (3, 384)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert np.allclose(out[0], out[2])
    assert np.allclose(out, embed(texts), atol=1e-6)  # the deterministic hash embedder
    assert float(out[0] @ out[1]) < 0.5


def test_json_kserve_request_as_the_agent_sends_it(triton: Stack) -> None:
    body = {
        "inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hello"]}],
        "outputs": [{"name": "EMBEDDING"}],
    }
    r = httpx.post(
        f"{triton.endpoints()['triton']}/v2/models/embedder/infer", json=body, timeout=10
    )
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["shape"] == [1, 384]
    assert len(out["data"]) == 384


def test_metrics_port_serves_triton_metrics(triton: Stack) -> None:
    info = {c.name: c for c in triton.describe().components}["triton"]
    assert set(info.ports) == {"port", "grpc", "metrics"}
    assert not {8000, 8001, 8002} & set(info.ports.values())
    text = httpx.get(f"http://127.0.0.1:{info.ports['metrics']}/metrics", timeout=5).text
    assert "nv_inference_request_success" in text

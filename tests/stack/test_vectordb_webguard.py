"""The Qdrant front refuses what a web page could send (issue 16.2); its clients still pass."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from qdrant_client import QdrantClient
from qdrant_client.http import models as qm
from tests.llmsim.test_gpu_injectors import Ctx, cycle
from tests.stack.conftest import REPO, marked_processes
from tests.webguard_http import ATTACKS, IDS, Attack, assert_refused, attacks_for

from faultday.core.ledger import Ledger
from faultday.core.profile import load_profile
from faultday.core.targets import Target, TargetKind
from faultday.stack.stack import Stack
from faultday_refstack.vectordb.seed import MODES

DEGRADED = [m for m in MODES if m != "normal"]
COLLECTION = {"vectors": {"size": 4, "distance": "Cosine"}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The front as the harness starts it: the local profile's qdrant, on 127.0.0.1."""
    run_dir = tmp_path_factory.mktemp("qdrant-webguard")
    profile = load_profile("local", base_dir=REPO).subset(["qdrant"])
    s = Stack(profile, run_dir=run_dir, ledger=Ledger.in_dir(run_dir))
    try:
        s.up(timeout=60)
        yield s
    finally:
        s.down()
        assert marked_processes(run_dir) == []


@pytest.fixture(scope="module")
def front(stack: Stack) -> str:
    return stack.endpoints()["qdrant"]


def state(front: str) -> dict[str, object]:
    return httpx.get(f"{front}/admin/state", timeout=5).json()  # type: ignore[no-any-return]


def collections(front: str) -> list[str]:
    result = httpx.get(f"{front}/collections", timeout=5).json()["result"]
    return sorted(c["name"] for c in result["collections"])


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_admin_refuses_every_browser_shape(front: str, attack: Attack) -> None:
    before = state(front)
    for mode in DEGRADED:
        text = assert_refused(f"{front}/admin/degrade", "POST", {"mode": mode}, attack)
        assert '"status":{"error":' in text.replace(" ", "")  # Qdrant's error envelope
    for method, path in (("POST", "/admin/restore"), ("GET", "/admin/golden")):
        if attack in attacks_for(method) and attack.content_type == "application/json":
            assert_refused(f"{front}{path}", method, None, attack)
    assert state(front) == before
    assert before["mode"] == "normal"


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_qdrant_api_refuses_every_browser_shape(front: str, attack: Attack) -> None:
    """On a loopback-bound front the data plane gets all four rules (webguard docs)."""
    before = collections(front)
    alias_swap = {
        "actions": [{"create_alias": {"collection_name": "web", "alias_name": "docs"}}],
    }
    assert_refused(f"{front}/collections/web", "PUT", COLLECTION, attack)
    assert_refused(f"{front}/collections/aliases", "POST", alias_swap, attack)
    assert_refused(f"{front}/collections/docs/points/delete", "POST", {"points": [1]}, attack)
    if attack in attacks_for("DELETE") and attack.content_type == "application/json":
        assert_refused(f"{front}/collections/docs__live", "DELETE", None, attack)
    assert collections(front) == before
    assert state(front)["serving"] == "docs__live"


def test_qdrant_client_and_harness_pass(front: str, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client = QdrantClient(url=front, prefer_grpc=False, timeout=30)
    try:
        client.create_collection(
            "guarded", vectors_config=qm.VectorParams(size=4, distance="Cosine")
        )
        client.upsert("guarded", [qm.PointStruct(id=1, vector=[1, 0, 0, 0], payload={"a": 1})])
        hits = client.query_points("guarded", query=[1, 0, 0, 0], limit=1).points
        assert [h.id for h in hits] == [1]
        client.delete("guarded", points_selector=qm.PointIdsList(points=[1]))
        assert client.count("guarded").count == 0
        assert client.delete_collection("guarded")
        # The harness: the vector_degrade injector (alias swap) and the agent check's golden set.
        target = Target(
            name="qdrant", kind=TargetKind.COMPONENT, component_type="qdrant", url=front
        )
        ctx = Ctx(tmp_path, {"qdrant": target}, lambda _: target)
        inj, revert = cycle("vector_degrade", ctx, target, {"mode": "empty"})
        assert client.count("docs").count == 0
        inj.revert(ctx, revert)
        assert client.count("docs").count == 40
    finally:
        client.close()
    assert httpx.get(f"{front}/admin/golden", timeout=5).json()["queries"]
    for mode in DEGRADED:
        resp = httpx.post(f"{front}/admin/degrade", json={"mode": mode}, timeout=10)
        assert resp.json()["mode"] == mode
    assert httpx.post(f"{front}/admin/restore", timeout=10).json()["mode"] == "normal"

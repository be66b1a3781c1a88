"""The edge primitive (injectors.edge): one revert model for every edge fault, and ledgers
written by the three models it replaced still recover, against faultday's proxy."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from pydantic import JsonValue
from tests.conftest import faultday
from tests.proxy.conftest import EchoServer

from faultday.core.ledger import Ledger
from faultday.core.targets import Target, TargetKind
from faultday.errors import InjectionError
from faultday.injectors.base import injector_registry
from faultday.injectors.edge import ENABLE_PROXY, REMOVE_TOXICS, EdgeData
from faultday.proxy import ProxyServer
from faultday.proxy.client import ToxiproxyClient

EDGE_FAULTS = ["outage", "redis_outage", "vector_outage", "latency"]
TOXIC = "faultday-slow-latency"

# How the models this module replaced wrote their revert data to the ledger, field for field.
# api and proxy are filled in per test; each case: injector, revert action, data, whether the
# fault adds a toxic (else it disables the proxy).
OLD_SHAPES: dict[str, tuple[str, str, dict[str, JsonValue], bool]] = {
    # network.ProxyData (outage)
    "ProxyData": ("outage", ENABLE_PROXY, {"proxy_api": "{api}", "proxy": "{proxy}"}, False),
    # network.ToxicData (latency and the other toxic faults)
    "ToxicData": (
        "latency",
        REMOVE_TOXICS,
        {"proxy_api": "{api}", "proxy": "{proxy}", "toxics": [TOXIC]},
        True,
    ),
    # cache.OutageData, edge form (redis_outage on an edge); its API written host:port
    "OutageData": (
        "redis_outage",
        ENABLE_PROXY,
        {"proxy_api": "{hostport}", "proxy_name": "{proxy}"},
        False,
    ),
    # vector.EdgeData (vector_outage)
    "EdgeData": (
        "vector_outage",
        ENABLE_PROXY,
        {"proxy_api": "{api}", "proxy_name": "{proxy}"},
        False,
    ),
}


def _fill(data: dict[str, JsonValue], *, api: str, proxy: str) -> dict[str, JsonValue]:
    hostport = api.split("://", 1)[1]
    return {
        k: v.format(api=api, proxy=proxy, hostport=hostport) if isinstance(v, str) else v
        for k, v in data.items()
    }


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"ping")
            return s.recv(10) == b"ping"
    except OSError:
        return False


def test_every_edge_fault_keeps_its_revert_in_the_one_model() -> None:
    registry = injector_registry()
    for name in EDGE_FAULTS:
        assert issubclass(registry.get(name).Data, EdgeData), name


@pytest.mark.parametrize("shape", sorted(OLD_SHAPES))
def test_old_revert_data_reads_back(shape: str) -> None:
    injector, _action, raw, toxic = OLD_SHAPES[shape]
    data = _fill(raw, api="http://127.0.0.1:8474", proxy="p")
    edge = injector_registry().get(injector).Data.model_validate(data)
    assert isinstance(edge, EdgeData)
    assert edge.proxy_name == "p"
    assert edge.proxy_api in {"http://127.0.0.1:8474", "127.0.0.1:8474"}
    assert edge.toxics == ((TOXIC,) if toxic else ())


@pytest.mark.parametrize("shape", sorted(OLD_SHAPES))
def test_recover_a_ledger_written_in_an_old_shape(
    shape: str, tmp_path: Path, inproc: ProxyServer, echo: EchoServer
) -> None:
    injector, action, raw, toxic = OLD_SHAPES[shape]
    proxy = inproc
    with ToxiproxyClient(proxy.api_url) as api:
        port = api.create_proxy("edge", upstream=echo.addr).port
        # The fault as the crashed harness left it: a toxic that holds every byte, or the edge off.
        if toxic:
            api.add_toxic("edge", type="timeout", name=TOXIC, attributes={"timeout": 0})
        else:
            api.set_enabled("edge", False)
        assert not _answers(port)
        run_dir = tmp_path / "20260101T000000-old"
        run_dir.mkdir()
        revert = {
            "id": "0123456789ab",
            "injector": injector,
            "fault": "slow",
            "target": "agent->edge",
            "action": action,
            "data": _fill(raw, api=proxy.api_url, proxy="edge"),
        }
        line = {"ts": time.time(), "op": "revert", "revert": revert}
        (run_dir / "ledger.jsonl").write_text(json.dumps(line) + "\n")

        r = faultday("recover", str(run_dir), "--keep-processes")

        assert r.returncode == 0, r.stdout + r.stderr
        assert f"reverted {injector} on agent->edge (fault slow)" in r.stdout
        assert api.proxy("edge").enabled
        assert api.toxics("edge") == []
        assert _answers(port)
        assert Ledger.in_dir(run_dir).outstanding_reverts() == []


def test_edge_faults_refuse_a_target_that_is_not_a_proxied_edge() -> None:
    unproxied = Target("agent->qdrant", TargetKind.EDGE)
    component = Target("redis", TargetKind.COMPONENT, "redis", proxy_api="x", proxy_name="y")
    for target in (unproxied, component):
        with pytest.raises(InjectionError, match="not a proxied edge"):
            EdgeData.for_target(target)

"""The simulator refuses what a web page could send (issue 16.2); its clients still pass."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from tests.llmsim.conftest import Sim, _stop, launch
from tests.llmsim.test_gpu_injectors import Ctx, cycle, sim_target
from tests.webguard_http import ATTACKS, HOST_ATTACK, IDS, Attack, assert_refused, attacks_for, send

from faultday_refstack.llmsim.faults import FaultKind
from faultday_wire.webguard import ALLOWED_HOSTS_ENV

# One fault body per kind the admin API takes: a refused POST must leave none of them behind.
NON_FATAL = [k for k in FaultKind if k not in (FaultKind.XID, FaultKind.OOM)]
FAULTS = [{"kind": k.value, "id": f"web-{k.value}"} for k in NON_FATAL] + [
    {"kind": FaultKind.XID.value, "xid": 79, "id": "web-xid"}
]
CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    one = launch(tmp_path_factory.mktemp("llmsim-webguard"), "--step-base-ms", "2")
    try:
        yield one
    finally:
        _stop(one.proc)


def served(sim: Sim) -> float:
    """Requests the engine finished, any reason."""
    done = sim.metrics().items()
    return sum(v for k, v in done if k.startswith("vllm:request_success_total"))


def assert_untouched(sim: Sim) -> None:
    view = httpx.get(f"{sim.url}/admin/faults", timeout=5).json()
    assert view["faults"] == []
    assert view["engine"] == "running"
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_admin_faults_refuses_every_browser_shape(sim: Sim, attack: Attack) -> None:
    for body in FAULTS:
        text = assert_refused(f"{sim.url}/admin/faults", "POST", body, attack)
        assert '"type": "ForbiddenError"' in text  # the simulator's own error shape
    for method, path in (("DELETE", "/admin/faults"), ("GET", "/admin/faults")):
        if attack in attacks_for(method) and attack.content_type == "application/json":
            assert_refused(f"{sim.url}{path}", method, None, attack)
    assert_untouched(sim)


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_openai_api_refuses_every_browser_shape(sim: Sim, attack: Attack) -> None:
    """On a loopback-bound simulator the data plane gets all four rules (webguard docs)."""
    before = served(sim)
    assert_refused(f"{sim.url}/v1/chat/completions", "POST", {**CHAT, "stream": True}, attack)
    assert_refused(f"{sim.url}/v1/completions", "POST", {"prompt": "x", "max_tokens": 2}, attack)
    if attack in attacks_for("GET"):
        assert_refused(f"{sim.url}/v1/models", "GET", None, attack)
    assert served(sim) == before  # nothing reached the engine


def test_a_refused_body_does_not_desync_the_connection(sim: Sim) -> None:
    """The refused request's body is drained or the connection closed, never run as a request."""
    hidden = b"DELETE /admin/faults HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with httpx.Client(base_url=sim.url, timeout=5) as client:
        fault = client.post("/admin/faults", json={"kind": "throttle", "id": "keep"})
        assert fault.status_code == 200
        resp = client.post("/admin/faults", content=hidden, headers={"Content-Type": "text/plain"})
        assert resp.status_code == 403
        assert [f["id"] for f in client.get("/admin/faults").json()["faults"]] == ["keep"]
        assert client.delete("/admin/faults/keep").status_code == 200
    assert_untouched(sim)


def test_harness_injectors_and_openai_client_pass(sim: Sim, tmp_path: Path) -> None:
    target = sim_target(sim)
    ctx = Ctx(tmp_path, {"llm-primary": target}, lambda _: target)
    inj, revert = cycle("gpu_throttle", ctx, target, {"factor": 3})
    assert sim.fault(kind="ecc_sbe")["kind"] == "ecc_sbe"  # the conftest's own helper
    inj.revert(ctx, revert)
    sim.clear()
    assert_untouched(sim)
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", timeout=10, max_retries=0)
    answer = client.chat.completions.create(model="test-model", messages=CHAT["messages"])  # type: ignore[arg-type]
    assert answer.choices[0].message.content
    with client.chat.completions.create(
        model="test-model",
        messages=CHAT["messages"],
        stream=True,
        max_tokens=3,  # type: ignore[arg-type]
    ) as stream:
        assert [c for c in stream if c.choices]


@pytest.mark.parametrize(
    "headers",
    [
        {},  # curl -X POST with --data-binary and no -H: no content type at all
        {"Content-Type": "application/json; charset=utf-8"},
        {"Content-Type": "application/json", "Host": "localhost"},
        {"Content-Type": "application/json", "Origin": "{own}"},
        {"Content-Type": "application/json", "User-Agent": "curl/8.5.0"},
    ],
)
def test_plain_clients_pass(sim: Sim, headers: dict[str, str]) -> None:
    own = {k: v.replace("{own}", sim.url) for k, v in headers.items()}
    body = b'{"kind": "throttle", "factor": 2, "id": "plain"}'
    resp = httpx.post(f"{sim.url}/admin/faults", content=body, headers=own, timeout=5)
    assert resp.status_code == 200, resp.text
    assert httpx.delete(f"{sim.url}/admin/faults/plain", headers=own, timeout=5).status_code == 200
    assert_untouched(sim)


def test_allowed_hosts_names_a_server_may_be_called_by(
    start_sim: Callable[..., Sim], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ALLOWED_HOSTS_ENV, "llm.gameday.internal")
    named = start_sim()
    port = named.url.rsplit(":", 1)[1]
    ok = send(
        f"{named.url}/admin/faults",
        "GET",
        None,
        Attack("named", {"Host": f"llm.gameday.internal:{port}"}),
    )
    assert ok.status_code == 200
    assert_refused(f"{named.url}/admin/faults", "POST", FAULTS[0], HOST_ATTACK)

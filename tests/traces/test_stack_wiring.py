"""The collector as a stack component: {otlp}, the OpenTelemetry env, the accessor, up/down."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest
from tests.stack.conftest import REPO, marked_processes, write_profile

from faultday.core.profile import OTEL_TRACES_ENDPOINT, load_profile
from faultday.core.spans import SpanKind
from faultday.core.spanstore import SPANS_DB, SpanStore
from faultday.errors import ScenarioError
from faultday.stack.stack import RUN_MARKER, Stack

pytestmark = pytest.mark.timeout(120)

# A component as its authors would write it: the OpenTelemetry SDK configured by the
# environment alone, one span at start, then an HTTP server for the readiness probe.
TRACED_APP = textwrap.dedent(
    """
    import json, os, sys, http.server as h
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind
    keys = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_SERVICE_NAME")
    with open(sys.argv[2], "w") as f:
        json.dump({k: os.environ.get(k) for k in keys}, f)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    with provider.get_tracer("app").start_as_current_span("startup", kind=SpanKind.SERVER):
        pass
    h.test(HandlerClass=h.SimpleHTTPRequestHandler, port=int(sys.argv[1]), bind="127.0.0.1")
    """
)

PROFILE = f"""\
spec:
  proxy: null
  collector: traces
  components:
    traces:
      type: collector
    app:
      command: ["{{python}}", "-c", {json.dumps(TRACED_APP)}, "{{port}}", "{{work_dir}}/env.json"]
      depends_on: [traces]
      ready: {{kind: http}}
    own:
      command: ["{{python}}", "-c", {json.dumps(TRACED_APP)}, "{{port}}", "{{work_dir}}/env.json"]
      depends_on: [traces]
      env: {{OTEL_SERVICE_NAME: custom, EXPLICIT: "{{otlp}}"}}
      ready: {{kind: http}}
"""

MakeStack = Callable[[str], Stack]


def test_trace_env_defaults_and_the_profile_overrides(tmp_path: Path) -> None:
    profile = load_profile(str(write_profile(tmp_path / "p.yaml", PROFILE)), base_dir=tmp_path)
    assert profile.trace_env("app") == {
        OTEL_TRACES_ENDPOINT: "{otlp}",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "app",
        "OTEL_BSP_SCHEDULE_DELAY": "500",
    }
    assert "OTEL_SERVICE_NAME" not in profile.trace_env("own")  # its env sets it
    assert profile.trace_env("traces") == {}  # the collector exports nothing
    # Only a component that names {otlp} itself waits for the collector.
    assert profile.dependencies("own") == {"traces"}


def test_components_export_to_the_collector_through_the_rendered_env(
    make_stack: MakeStack,
) -> None:
    s = make_stack(PROFILE)
    assert (address := s.collector()) is not None
    assert address.db_path == s.run_dir / "traces" / SPANS_DB
    assert address.stats_url == address.otlp_url == ""  # not up yet
    s.up(timeout=60)
    address = s.collector()
    assert address is not None
    otlp = f"{s.endpoints()['traces']}/v1/traces"
    assert address.otlp_url == otlp
    assert address.stats_url == f"{s.endpoints()['traces']}/stats"
    launched = json.loads((s.run_dir / "app" / "env.json").read_text())
    assert launched == {
        OTEL_TRACES_ENDPOINT: otlp,
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "app",
    }
    own = json.loads((s.run_dir / "own" / "env.json").read_text())
    assert own["OTEL_SERVICE_NAME"] == "custom"
    assert own[OTEL_TRACES_ENDPOINT] == otlp
    stats = httpx.get(address.stats_url, timeout=5).json()
    assert stats["spans_accepted"] == 2
    with SpanStore(address.db_path) as store:
        spans = store.read()
    assert sorted((sp.service, sp.name, sp.kind) for sp in spans) == [
        ("app", "startup", SpanKind.SERVER),
        ("custom", "startup", SpanKind.SERVER),
    ]
    s.down()
    assert marked_processes(s.run_dir) == []
    assert (after := s.collector()) is not None
    assert after.db_path.exists()  # the run copies its spans from it after down


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("collector: traces\n", "no component 'traces'"),
        ("collector: web\n", "component 'web' is of type 'command', not 'collector'"),
        ("collector: null\n", "{otlp} needs a trace collector: spec.collector"),
    ],
)
def test_profile_errors_name_the_field(tmp_path: Path, change: str, message: str) -> None:
    body = (
        "spec:\n  proxy: null\n  "
        + change
        + "  components:\n    web:\n"
        + '      command: ["{python}", "-m", "http.server", "{port}"]\n'
        + '      env: {X: "{otlp}"}\n'
    )
    if "null" not in change:
        body = body.replace('      env: {X: "{otlp}"}\n', "")
    with pytest.raises(ScenarioError) as err:
        load_profile(str(write_profile(tmp_path / "p.yaml", body)), base_dir=tmp_path)
    assert message in str(err.value)


FAULTDAY = str(Path(sys.executable).parent / "faultday")


def _stack_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FAULTDAY, "stack", *args], cwd=cwd, capture_output=True, text=True, timeout=90, check=False
    )


def test_stack_up_and_down_of_the_local_profile_runs_and_stops_the_collector(
    tmp_path: Path,
) -> None:
    """The whole local profile (up in ~15 s here): each component is launched with the
    collector's address, and `stack down` leaves nothing running."""
    state = tmp_path / "state"
    opts = ["--profile", str(REPO / "stack" / "local.yaml"), "--state-dir", str(state)]
    try:
        up = _stack_cli("up", *opts, cwd=tmp_path)
        assert up.returncode == 0, up.stdout + up.stderr
        info = json.loads((state / "state.json").read_text())["info"]
        comps = {c["name"]: c for c in info["components"]}
        collector = comps.pop("collector")
        assert collector["health"] == "ready"
        otlp = collector["url"] + "/v1/traces"
        checked = []
        for name, c in comps.items():
            env = psutil.Process(c["pid"]).environ()
            if RUN_MARKER not in env:
                continue  # redis-server's process title overwrites its environment block
            assert env[OTEL_TRACES_ENDPOINT] == otlp, name
            assert env["OTEL_SERVICE_NAME"] == name
            checked.append(name)
        assert len(checked) >= len(comps) - 1, checked
        assert "requests" in httpx.get(collector["url"] + "/stats", timeout=5).json()
        assert (state / "collector" / SPANS_DB).exists()
        down = _stack_cli("down", *opts, cwd=tmp_path)
        assert down.returncode == 0, down.stdout + down.stderr
        assert not psutil.pid_exists(collector["pid"]) or (
            psutil.Process(collector["pid"]).status() == psutil.STATUS_ZOMBIE
        )
    finally:
        _stack_cli("down", *opts, cwd=tmp_path)
        assert marked_processes(state.resolve()) == []


def test_without_collector_drops_the_component_and_the_field() -> None:
    local = load_profile("local", base_dir=REPO)
    assert local.spec.collector == "collector"
    plain = local.without_collector()
    assert plain.spec.collector is None
    assert set(plain.spec.components) == set(local.spec.components) - {"collector"}
    assert plain.trace_env("agent") == {}
    assert plain.without_collector() is plain

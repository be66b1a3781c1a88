"""A team's own OpenTelemetry-instrumented services, traced in a faultday run.

The test writes two small FastAPI services that know nothing of faultday, instrumented
the way their authors would (FastAPIInstrumentor, HTTPXClientInstrumentor, the SDK's
BatchSpanProcessor and an OTLPSpanExporter configured only by the standard OTEL_*
variables), declares them as `command` components of a profile with a collector and a
fault proxy on checkout->price, and runs a scenario that slows that edge. Their spans
land in traces.db under their component names, every client request joins its trace,
and the report's "Where the time went" names their hops. Nothing stands in for anything.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from tests.conftest import faultday

SHOP = '''\
"""Checkout and price: two services, each instrumented as its authors would."""

import os
import time

import httpx
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

# The endpoint, the protocol and the service's name come from the OTEL_* variables.
provider = TracerProvider(resource=Resource.create())
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
HTTPXClientInstrumentor().instrument()

checkout_app = FastAPI()
price_app = FastAPI()
FastAPIInstrumentor.instrument_app(checkout_app)
FastAPIInstrumentor.instrument_app(price_app)
prices = httpx.Client(base_url=os.environ.get("PRICE_URL", ""), timeout=10.0)


@checkout_app.get("/checkout")
def checkout() -> dict[str, float]:
    answer = prices.get("/price", params={"sku": "tea"})
    answer.raise_for_status()
    return {"total": answer.json()["price"] * 2}


@price_app.get("/price")
def price(sku: str) -> dict[str, float]:
    time.sleep(0.08)  # a lookup with some weight, so the hop shows
    return {"price": 4.5}
'''

PROFILE = """\
apiVersion: faultday/v1
kind: StackProfile
metadata: {{name: shop}}
spec:
  proxy: proxy
  collector: collector
  components:
    proxy:
      type: proxy
    collector:
      type: collector
    price:
      type: command
      command: ["{{python}}", "-m", "uvicorn", "--app-dir", "{app_dir}", "shop:price_app",
                "--host", "127.0.0.1", "--port", "{{port}}", "--no-access-log"]
      ready: {{kind: http, path: "/price?sku=probe"}}
    checkout:
      type: command
      command: ["{{python}}", "-m", "uvicorn", "--app-dir", "{app_dir}", "shop:checkout_app",
                "--host", "127.0.0.1", "--port", "{{port}}", "--no-access-log"]
      env: {{PRICE_URL: "{{url:price}}"}}
  edges:
    - checkout->price
"""

SCENARIO = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: slow-price}
spec:
  stack: shop.stack.yaml
  duration: 14s
  warmup: 2s
  recovery: 2s
  load:
    workload: http
    target: checkout
    path: /checkout
    users: 4
    spawn_rate: 50
    sample_interval: 500ms
  faults:
    - {name: slow-price, inject: latency, target: checkout->price, at: 6s, duration: 5s,
       with: {latency: 300ms}}
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("no_leftovers")
def test_own_instrumented_services_show_in_where_the_time_went(tmp_path: Path) -> None:
    app_dir = tmp_path / "shop"
    app_dir.mkdir()
    (app_dir / "shop.py").write_text(SHOP)
    (tmp_path / "shop.stack.yaml").write_text(PROFILE.format(app_dir=app_dir))
    scenario = tmp_path / "slow-price.scenario.yaml"
    scenario.write_text(SCENARIO)
    r = faultday("run", str(scenario), "--report-dir", str(tmp_path / "r"), timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    (run_dir,) = (tmp_path / "r").iterdir()

    with sqlite3.connect(run_dir / "traces.db") as db:
        services = {s for (s,) in db.execute("SELECT DISTINCT service FROM spans")}
    # Each service under its component's name (OTEL_SERVICE_NAME), and the proxy's hop between.
    assert {"checkout", "price", "proxy"} <= services, services

    traces = json.loads((run_dir / "traces.json").read_text())
    assert traces["requests"] > 0, traces
    assert traces["requests_traced"] == traces["requests"], traces["note"]
    assert {"checkout", "price"} <= set(traces["services"])
    baseline = next(w for w in traces["windows"] if w["kind"] == "baseline")
    fault = next(w for w in traces["windows"] if w["kind"] == "fault")
    hops = {(h["service"], h["span"]) for w in (baseline, fault) for h in w["hops"]}
    # Both services' SERVER spans (FastAPIInstrumentor) and checkout's CLIENT span (httpx).
    assert {("checkout", "GET /checkout"), ("checkout", "GET"), ("price", "GET /price")} <= hops
    # The baseline's time is price's lookup (its 80 ms sleep); 300 ms on the edge moves
    # the time to checkout's call to price, where the proxy's span is credited.
    assert (baseline["top"]["service"], baseline["top"]["span"]) == ("price", "GET /price")
    mover = fault["mover"]
    assert (mover["service"], mover["span"]) == ("checkout", "GET"), mover
    assert mover["share"] > 0.5 > mover["baseline_share"], mover
    (moved,) = [h for h in fault["hops"] if (h["service"], h["span"]) == ("checkout", "GET")]
    assert any(f.startswith("latency(latency=300") for f in moved["faults"]), moved

    md = (run_dir / "report.md").read_text()
    html = (run_dir / "report.html").read_text()
    assert "## Where the time went" in md and "Where the time went" in html
    where_md = md[md.find("## Where the time went") :]
    where_html = html[html.find("Where the time went") :]
    assert "the top hop was price/GET /price" in where_md, where_md[:3000]
    said = re.search(r"During slow-price, (\d+) % of request time was in checkout/GET,", where_md)
    assert said and int(said.group(1)) > 50, where_md[:3000]
    for hop in ("checkout/GET /checkout", "price/GET /price"):
        assert f"`{hop}`" in where_md
        assert hop in where_html
    # An exemplar waterfall: the trace id, checkout's root, price's span under it.
    (slowest,) = [e for e in traces["exemplars"] if e["kind"] == "slowest_ok"]
    assert slowest["trace_id"] in where_md and slowest["trace_id"] in where_html
    assert "```text\nGET /checkout  checkout" in where_md
    assert "GET /price  price" in where_md
    assert "<svg" in where_html

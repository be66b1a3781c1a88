"""``GET /metrics``: Toxiproxy's byte counters under their names, plus faultday's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from faultday.proxy.server import ProxyServer

_DIRECTIONS = ("upstream", "downstream")


class ProxyCollector(Collector):
    def __init__(self, server: ProxyServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        labels = ["direction", "listener", "proxy", "upstream"]
        received = CounterMetricFamily(
            "toxiproxy_proxy_received_bytes", "Bytes received by the proxy", labels=labels
        )
        sent = CounterMetricFamily(
            "toxiproxy_proxy_sent_bytes", "Bytes sent by the proxy", labels=labels
        )
        conns = CounterMetricFamily(
            "faultday_proxy_connections", "Connections accepted", labels=["proxy"]
        )
        active = GaugeMetricFamily(
            "faultday_proxy_connections_active", "Connections open now", labels=["proxy"]
        )
        requests = CounterMetricFamily(
            "faultday_proxy_http_requests", "HTTP requests seen", labels=["proxy"]
        )
        responses = CounterMetricFamily(
            "faultday_proxy_http_responses",
            "HTTP responses by status (including ones a toxic wrote)",
            labels=["proxy", "code"],
        )
        actions = CounterMetricFamily(
            "faultday_proxy_toxic_actions", "Times a toxic acted", labels=["proxy", "type"]
        )
        failures = CounterMetricFamily(
            "faultday_proxy_upstream_failures",
            "Client connections whose upstream could not be reached",
            labels=["proxy"],
        )
        for name, proxy in list(self.server.proxies.items()):
            snap = proxy.counters.snapshot(name)
            for i, direction in enumerate(_DIRECTIONS):
                lv = [direction, proxy.listen, name, proxy.upstream]
                received.add_metric(
                    lv, (snap.bytes_received_upstream, snap.bytes_received_downstream)[i]
                )
                sent.add_metric(lv, (snap.bytes_sent_upstream, snap.bytes_sent_downstream)[i])
            conns.add_metric([name], snap.connections_total)
            active.add_metric([name], snap.connections_active)
            requests.add_metric([name], snap.http_requests)
            failures.add_metric([name], snap.upstream_failures)
            for status, count in snap.http_responses:
                responses.add_metric([name, str(status)], count)
            for kind, count in snap.toxic_actions:
                actions.add_metric([name, kind], count)
        yield from (received, sent, conns, active, requests, responses, actions, failures)


def render_metrics(server: ProxyServer) -> bytes:
    # A registry per call: no process-global collector state.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProxyCollector(server))
    return generate_latest(registry)

"""faultday's Toxiproxy-API-compatible fault proxy (see ``server.ProxyServer``)."""

from faultday.proxy.counters import ProxyCounters
from faultday.proxy.server import ProxyError, ProxyServer

__all__ = ["ProxyCounters", "ProxyError", "ProxyServer"]

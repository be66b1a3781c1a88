"""The one edge primitive: turn a proxied edge off and on, add and remove its toxics.

Every fault on an edge (``outage``, ``redis_outage`` on an edge, ``vector_outage``
and the toxic faults of ``network``) goes through these functions, on the typed
Toxiproxy client, with :class:`EdgeData` as its revert. The edge's ``proxy_api``
may be faultday's proxy or a real toxiproxy-server: configuration, not code.

Ledgers written before this module read back: the proxy's name was stored as
``proxy`` by ``outage`` and the toxic faults, as ``proxy_name`` by
``redis_outage`` and ``vector_outage``; both validate into ``proxy_name``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar, Self

from pydantic import AliasChoices, Field, JsonValue

from faultday.core.targets import Revert, Target, TargetKind
from faultday.errors import InjectionError, RevertError
from faultday.injectors.base import FaultContext, Injector, NoParams, RevertData
from faultday.proxy.client import ProxyAPIError, ToxiproxyClient

log = logging.getLogger(__name__)

API_TIMEOUT = 5.0
EDGE = frozenset({TargetKind.EDGE})
# The revert actions of edge faults, as the ledger stores them.
ENABLE_PROXY = "enable_proxy"
REMOVE_TOXICS = "remove_toxics"
# ``proxy``: how ``outage`` and the toxic faults stored the name before (ProxyData, ToxicData).
PROXY_NAME_ALIASES = AliasChoices("proxy_name", "proxy")


class EdgeData(RevertData):
    """What an edge fault's revert needs: the proxy, and the toxics it adds (none for an outage)."""

    proxy_api: str = Field(description="base URL of the Toxiproxy-API server")
    proxy_name: str = Field(validation_alias=PROXY_NAME_ALIASES, description="the proxy's name")
    toxics: tuple[str, ...] = Field(default=(), description="toxics the fault adds, by name")

    @classmethod
    def for_target(cls, target: Target, *, toxics: Sequence[str] = ()) -> Self:
        """The data for a proxied edge; InjectionError for any other target."""
        if target.kind is not TargetKind.EDGE or not (target.proxy_api and target.proxy_name):
            raise InjectionError(f"{target.name}: not a proxied edge (no proxy_api / proxy_name)")
        return cls(proxy_api=target.proxy_api, proxy_name=target.proxy_name, toxics=tuple(toxics))


def _client(api: str) -> ToxiproxyClient:
    # An edge's API may be written host:port (profiles, older ledgers): http is meant.
    return ToxiproxyClient(api if "://" in api else f"http://{api}", timeout=API_TIMEOUT)


def disable(edge: EdgeData, *, target: str) -> None:
    """Take the edge down: its proxy refuses new connections and closes open ones."""
    with _client(edge.proxy_api) as client:
        try:
            client.set_enabled(edge.proxy_name, False)
        except ProxyAPIError as exc:
            raise InjectionError(f"{target}: disabling proxy {edge.proxy_name}: {exc}") from exc
    log.info("%s: proxy %s disabled", target, edge.proxy_name)


def enable(edge: EdgeData, *, target: str) -> None:
    """Bring the edge back. Idempotent; a proxy (or proxy server) that is gone needs nothing."""
    with _client(edge.proxy_api) as client:
        try:
            client.set_enabled(edge.proxy_name, True)
        except ProxyAPIError as exc:
            if exc.status == 404 or exc.unreachable:
                log.info("%s: proxy %s is gone; nothing to re-enable", target, edge.proxy_name)
                return
            raise RevertError(f"{target}: re-enabling proxy {edge.proxy_name}: {exc}") from exc
    log.info("%s: proxy %s enabled", target, edge.proxy_name)


def add_toxics(
    edge: EdgeData,
    *,
    toxic_type: str,
    streams: Sequence[str],
    toxicity: float,
    attributes: dict[str, JsonValue],
    target: str,
) -> None:
    """Add the edge's toxics (``edge.toxics``, one per stream, in order).

    A toxic of that name already there was left by a harness that died before its
    revert (same fault, same name): it is updated in place.
    """
    with _client(edge.proxy_api) as client:
        for name, stream in zip(edge.toxics, streams, strict=True):
            try:
                client.add_toxic(
                    edge.proxy_name,
                    type=toxic_type,
                    name=name,
                    stream=stream,
                    toxicity=toxicity,
                    attributes=attributes,
                )
            except ProxyAPIError as exc:
                if exc.status != 409:
                    raise InjectionError(f"{target}: {exc}") from exc
                try:
                    client.update_toxic(
                        edge.proxy_name, name, attributes=attributes, toxicity=toxicity
                    )
                except ProxyAPIError as exc2:
                    raise InjectionError(f"{target}: {exc2}") from exc2
    log.info("%s: %s toxic(s) %s on proxy %s", target, toxic_type, edge.toxics, edge.proxy_name)


def remove_toxics(edge: EdgeData, *, target: str) -> None:
    """Remove the edge's toxics. Idempotent; a proxy server that is gone took them with it."""
    with _client(edge.proxy_api) as client:
        for name in edge.toxics:
            try:
                client.delete_toxic(edge.proxy_name, name, missing_ok=True)
            except ProxyAPIError as exc:
                if exc.unreachable:
                    log.info(
                        "%s: proxy API %s is gone; toxic %s went with it",
                        target,
                        edge.proxy_api,
                        name,
                    )
                    continue
                raise RevertError(f"{target}: removing toxic {name}: {exc}") from exc


class EdgeOutage(Injector[NoParams, EdgeData]):
    """Base of the faults that take an edge down (its proxy disabled) until the revert."""

    Params = NoParams
    Data = EdgeData
    target_kinds: ClassVar[frozenset[TargetKind]] = EDGE

    def prepare(self, ctx: FaultContext, target: Target, params: NoParams, *, fault: str) -> Revert:
        data = EdgeData.for_target(target)
        return self.record(target, fault=fault, action=ENABLE_PROXY, data=data)

    def inject(self, ctx: FaultContext, target: Target, params: NoParams, revert: Revert) -> None:
        disable(self.data(revert), target=target.name)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        enable(self.data(revert), target=revert.target)

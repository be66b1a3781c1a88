"""Vector-store faults: ``vector_outage`` (unreachable) and ``vector_degrade`` (recall drops).

``vector_degrade`` is the quiet failure: every health check stays green while
searches come back empty or stale. It swaps the alias the runtime queries
(``vector.collection`` in agent.yaml) to an empty collection, or to a stale one
the stack keeps, through Qdrant REST (``POST /collections/aliases``), which is
how a real Qdrant blue/green switch is done; the revert swaps it back.
"""

from __future__ import annotations

import logging
from typing import ClassVar, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from faultday.core.targets import Revert, Target
from faultday.errors import InjectionError, RevertError
from faultday.injectors.base import FaultContext, Injector, RevertData
from faultday.injectors.edge import EdgeOutage

log = logging.getLogger(__name__)

QDRANT = "qdrant"
TIMEOUT_S = 10.0
EMPTY_SUFFIX = "__faultday_empty"


class VectorDegradeParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    collection: str = Field(default="docs", description="the alias the runtime searches")
    mode: Literal["empty", "stale"] = "empty"
    stale_collection: str | None = Field(default=None, description="mode stale: swap to this one")

    @model_validator(mode="after")
    def _stale_needs_source(self) -> VectorDegradeParams:
        if self.mode == "stale" and not self.stale_collection:
            raise ValueError("mode 'stale' needs stale_collection")
        return self


def _base(target: Target) -> str:
    base = target.url
    if not base:
        raise InjectionError(f"{target.name}: no url for the Qdrant REST endpoint")
    return (base if "://" in base else f"http://{base}").rstrip("/")


def _req(method: str, url: str, body: dict[str, JsonValue] | None = None) -> httpx.Response:
    return httpx.request(method, url, json=body, timeout=TIMEOUT_S)


def alias_target(base: str, alias: str) -> str | None:
    """The collection an alias points at, or None when no such alias exists."""
    resp = _req("GET", f"{base}/aliases")
    resp.raise_for_status()
    for a in resp.json().get("result", {}).get("aliases", []):
        if a.get("alias_name") == alias:
            return str(a.get("collection_name"))
    return None


def switch_alias(base: str, alias: str, collection: str) -> None:
    body: dict[str, JsonValue] = {
        "actions": [
            {"delete_alias": {"alias_name": alias}},
            {"create_alias": {"collection_name": collection, "alias_name": alias}},
        ]
    }
    resp = _req("POST", f"{base}/collections/aliases", body)
    resp.raise_for_status()


class AliasData(RevertData):
    """The alias a fault swaps, where it pointed, and the collection it made (if any)."""

    base: str
    alias: str
    original: str
    swap_to: str
    created: bool


class VectorDegrade(Injector[VectorDegradeParams, AliasData]):
    """Swap the searched collection for an empty or stale one; health checks stay green."""

    name = "vector_degrade"
    summary = "collection alias swapped to an empty or stale collection (recall drops)"
    Params = VectorDegradeParams
    Data = AliasData
    component_types: ClassVar[frozenset[str] | None] = frozenset({QDRANT})

    def prepare(
        self, ctx: FaultContext, target: Target, params: VectorDegradeParams, *, fault: str
    ) -> Revert:
        base = _base(target)
        try:
            original = alias_target(base, params.collection)
        except (httpx.HTTPError, ValueError) as exc:
            raise InjectionError(f"{target.name}: cannot read aliases at {base}: {exc}") from exc
        if original is None:
            raise InjectionError(
                f"{target.name}: {params.collection!r} is not an alias; serve the collection "
                "through an alias so that it can be swapped (POST /collections/aliases)"
            )
        swap_to = params.stale_collection or f"{original}{EMPTY_SUFFIX}"
        data = AliasData(
            base=base,
            alias=params.collection,
            original=original,
            swap_to=swap_to,
            created=params.mode == "empty",
        )
        return self.record(target, fault=fault, action="restore_alias", data=data)

    def inject(
        self, ctx: FaultContext, target: Target, params: VectorDegradeParams, revert: Revert
    ) -> None:
        d = self.data(revert)
        base, original, swap_to = d.base, d.original, d.swap_to
        try:
            if d.created:
                info = _req("GET", f"{base}/collections/{original}")
                info.raise_for_status()
                vectors = info.json()["result"]["config"]["params"]["vectors"]
                made = _req("PUT", f"{base}/collections/{swap_to}", {"vectors": vectors})
                if made.status_code not in (200, 409):
                    made.raise_for_status()
            switch_alias(base, d.alias, swap_to)
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise InjectionError(f"{target.name}: alias swap failed: {exc}") from exc

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        d = self.data(revert)
        base, alias = d.base, d.alias
        try:
            switch_alias(base, alias, d.original)
            if d.created:
                gone = _req("DELETE", f"{base}/collections/{d.swap_to}")
                if gone.status_code not in (200, 404):
                    gone.raise_for_status()
        except httpx.HTTPError as exc:
            raise RevertError(f"{revert.target}: restoring alias {alias!r} failed: {exc}") from exc


class VectorOutage(EdgeOutage):
    """The vector store unreachable: the proxy on the edge to it disabled."""

    name = "vector_outage"
    summary = "vector store unreachable (proxy on its edge disabled)"

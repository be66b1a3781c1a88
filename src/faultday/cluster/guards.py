"""Blast-radius guards: every object faultday changes must be in an allowed namespace and
carry the stack's ``app.kubernetes.io/part-of`` label.

The guard is checked by the cluster client itself, right before each mutating
call, so no injector can forget it. Nodes are not namespaced and carry no
stack label: a node is in the blast radius only while it runs a pod of the
stack in an allowed namespace (and, for GPU faults, carries the GPU label).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from faultday.cluster.config import NAME_LABEL, PART_OF_LABEL
from faultday.errors import InjectionError


class BlastRadiusError(InjectionError):
    """A fault or a driver action would touch something outside the stack."""


@dataclass(frozen=True, slots=True)
class BlastRadius:
    """Namespaces faults may touch, and the label value that marks the stack's objects."""

    namespaces: frozenset[str]
    part_of: str

    def __post_init__(self) -> None:
        if not self.namespaces:
            raise BlastRadiusError("the namespace allowlist is empty: nothing may be touched")
        if not self.part_of:
            raise BlastRadiusError("no part-of label value: every object would match")

    def check_namespace(self, namespace: str | None) -> str:
        if not namespace or namespace not in self.namespaces:
            allowed = ", ".join(sorted(self.namespaces))
            raise BlastRadiusError(
                f"namespace {namespace!r} is not in the allowlist ({allowed}); refusing"
            )
        return namespace

    def check_object(
        self, *, kind: str, namespace: str | None, name: str, labels: Mapping[str, str] | None
    ) -> None:
        """Refuse unless the object is namespaced in the allowlist and labelled as the stack's."""
        self.check_namespace(namespace)
        got = (labels or {}).get(PART_OF_LABEL)
        if got != self.part_of:
            raise BlastRadiusError(
                f"{kind} {namespace}/{name} is not labelled {PART_OF_LABEL}={self.part_of} "
                f"(it has {got!r}); refusing to touch it"
            )

    def check_node(
        self,
        *,
        node: str,
        node_labels: Mapping[str, str],
        stack_pods_on_node: Iterable[str],
        require_label: str = "",
    ) -> None:
        """A node may be changed only while it hosts the stack (and has the GPU label)."""
        if not list(stack_pods_on_node):
            raise BlastRadiusError(
                f"node {node} runs no pod labelled {PART_OF_LABEL}={self.part_of} in "
                f"{', '.join(sorted(self.namespaces))}; refusing to touch it"
            )
        if require_label:
            key, _, value = require_label.partition("=")
            if node_labels.get(key) != value:
                raise BlastRadiusError(
                    f"node {node} lacks the label {require_label}; refusing to touch it"
                )

    def selector(self, component: str | None = None) -> str:
        """A label selector that can only ever match the stack's objects."""
        parts = [f"{PART_OF_LABEL}={self.part_of}"]
        if component:
            parts.append(f"{NAME_LABEL}={component}")
        return ",".join(parts)

    def selector_labels(self, component: str | None = None) -> dict[str, str]:
        out = {PART_OF_LABEL: self.part_of}
        if component:
            out[NAME_LABEL] = component
        return out

    def to_json(self) -> dict[str, JsonValue]:
        namespaces: list[JsonValue] = [*sorted(self.namespaces)]
        return {"namespaces": namespaces, "part_of": self.part_of}

    @classmethod
    def from_json(cls, raw: JsonValue) -> BlastRadius:
        if not isinstance(raw, dict):
            raise BlastRadiusError(f"bad blast radius record: {raw!r}")
        ns = raw.get("namespaces")
        return cls(
            namespaces=frozenset(str(n) for n in ns) if isinstance(ns, list) else frozenset(),
            part_of=str(raw.get("part_of") or ""),
        )

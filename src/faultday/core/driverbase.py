"""What the process, docker and kubernetes drivers share, written once.

Each driver keeps its profile, run folder, ledger and policy the same way and builds
the same ``Target`` and ``StackInfo`` values from them; only where the stack runs
(processes, containers, pods) differs, and stays in the drivers.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from faultday.core.ledger import Ledger
from faultday.core.profile import Edge, StackProfile
from faultday.core.stackinfo import ComponentInfo, EdgeInfo, StackInfo
from faultday.core.targets import Target, TargetKind


class DriverBase:
    """A stack driver's profile, folder, ledger and policy, and the values made of them."""

    def __init__(
        self, profile: StackProfile, *, run_dir: Path, ledger: Ledger, policy: str | None
    ) -> None:
        self.profile = profile
        self.run_dir = run_dir
        self.ledger = ledger
        self.policy = policy or profile.spec.policy

    def _component_target(
        self, name: str, *, url: str, admin_url: str, pid: int | None = None
    ) -> Target:
        """The component ``name`` as an injector's target."""
        return Target(
            name=name,
            kind=TargetKind.COMPONENT,
            component_type=self.profile.ctype(name).name,
            url=url,
            admin_url=admin_url,
            pid=pid,
        )

    def _edge_target(self, edge: Edge, *, url: str, proxy_api: str, upstream: str) -> Target:
        """The edge as an injector's target: ``url`` is where its source connects."""
        return Target(
            name=edge.name,
            kind=TargetKind.EDGE,
            component_type=self.profile.ctype(edge.dst).name,
            url=url,
            proxy_api=proxy_api,
            proxy_name=edge.proxy_name,
            upstream=upstream,
        )

    def _component_info(
        self,
        name: str,
        *,
        url: str,
        admin_url: str,
        ports: dict[str, int],
        pid: int | None,
        health: str,
        restarts: int,
        log: str,
    ) -> ComponentInfo:
        """The component as ``describe()`` shows it."""
        return ComponentInfo(
            name=name,
            type=self.profile.ctype(name).name,
            url=url,
            admin_url=admin_url,
            ports=ports,
            pid=pid,
            health=health,
            restarts=restarts,
            log=log,
        )

    def _shown_admin_url(self, name: str, url: str) -> str:
        """The component's fault admin API in full, as ``describe()`` shows it ("" without a
        URL or an admin API); a target carries only the base URL: injectors add the path."""
        admin_path = self.profile.ctype(name).admin_path
        return f"{url}{admin_path}" if url and admin_path else ""

    def _edge_info(
        self, edge: Edge, *, listen: str, upstream: str, proxy_name: str, proxy_api: str
    ) -> EdgeInfo:
        """The edge as ``describe()`` shows it ("" for what the driver does not know)."""
        return EdgeInfo(
            name=edge.name,
            src=edge.src,
            dst=edge.dst,
            listen=listen,
            upstream=upstream,
            proxy_name=proxy_name,
            proxy_api=proxy_api,
        )

    def _stack_info(
        self, components: Iterable[ComponentInfo], edges: Iterable[EdgeInfo]
    ) -> StackInfo:
        """``describe()``'s answer from what the driver found of each component and edge."""
        return StackInfo(
            profile=self.profile.name,
            source=self.profile.source,
            run_dir=str(self.run_dir),
            policy=self.policy,
            components=tuple(components),
            edges=tuple(edges),
        )

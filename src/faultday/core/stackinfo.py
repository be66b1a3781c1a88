"""What a stack driver says about its stack: the journal's ``stack`` section and
``faultday stack status``. Every driver answers ``describe()`` with these."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ComponentInfo(_Frozen):
    name: str
    type: str
    url: str
    admin_url: str
    ports: dict[str, int]
    pid: int | None
    health: str  # ready, unready, paused, restarting, exited, stopped, not started
    restarts: int
    log: str


class EdgeInfo(_Frozen):
    name: str
    src: str
    dst: str
    listen: str  # host:port the source connects to
    upstream: str  # host:port of the destination
    proxy_name: str
    proxy_api: str


class StackInfo(_Frozen):
    profile: str
    source: str
    run_dir: str
    policy: str
    components: tuple[ComponentInfo, ...]
    edges: tuple[EdgeInfo, ...]

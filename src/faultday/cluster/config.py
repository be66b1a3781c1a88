"""Driver configuration for a cluster: where the stack lives and how far faults may reach.

A ``KubernetesTarget`` file (YAML, validated with positions like a profile) or the
CLI options build a ``KubernetesConfig``. The namespace allowlist and the
``part-of`` label are the blast radius: nothing outside them is ever touched.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from faultday.core.types import Duration
from faultday.core.yamlpos import parse_file, validation_problems
from faultday.errors import ScenarioError, StackError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

PART_OF_LABEL = "app.kubernetes.io/part-of"
NAME_LABEL = "app.kubernetes.io/name"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
# One run's load objects (ConfigMap, Service, Jobs): what recover deletes after a crash.
LOAD_RUN_LABEL = "faultday.dev/load-run"
# One deploy of a stack (its Deployments, Services, ConfigMaps; or its Docker containers and
# network): set at apply/create time, so recover never deletes what another deploy re-created.
STACK_RUN_LABEL = "faultday.dev/stack-run"
DNS_LABEL = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"


def part_of_value(profile_name: str) -> str:
    """The label value every object of a stack carries (the renderer's convention)."""
    return f"faultday-{profile_name}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterAccess(_Strict):
    """How to reach the API server; copied into every revert so ``recover`` can reconnect."""

    kubeconfig: str | None = Field(default=None, description="kubeconfig file [$KUBECONFIG]")
    context: str | None = Field(default=None, description="kubeconfig context [current]")
    host: str | None = Field(
        default=None, description="API server URL used as is (kubectl proxy, API stand-ins)"
    )
    in_cluster: bool = Field(default=False, description="use the pod's service account")
    request_timeout: float = Field(default=10.0, gt=0, le=300, description="seconds per call")

    def client(self) -> ApiClient:
        """A fresh ``kubernetes.client.ApiClient`` for this access (caller closes it)."""
        try:
            # Optional dependency: the kubernetes client (faultday[k8s]), for clusters only.
            from kubernetes import client, config  # noqa: PLC0415
        except ImportError as exc:
            raise StackError("the kubernetes driver needs faultday[k8s]") from exc
        cfg = client.Configuration()
        if self.host:
            cfg.host = self.host
        elif self.in_cluster:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            try:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=self.kubeconfig, context=self.context, client_configuration=cfg
                )
            except (config.ConfigException, OSError) as exc:
                raise StackError(f"cannot load kubeconfig: {exc}") from exc
        # urllib3 retries would stretch our timeouts; the callers decide what to retry.
        cfg.retries = 0
        return client.ApiClient(cfg)


class DockerAccess(_Strict):
    """How to reach a Docker engine; copied into the stack's cleanup record for ``recover``."""

    base_url: str | None = Field(default=None, description="engine URL given in the config")
    docker_host: str | None = Field(
        default=None, description="$DOCKER_HOST when the stack came up (used if no base_url)"
    )
    api_version: str = "1.41"
    timeout: float = Field(default=30.0, gt=0, description="seconds per Engine API call")

    def client(self) -> Any:
        """A ``docker.DockerClient`` for this access (caller closes it)."""
        try:
            # Optional dependency: the docker SDK (faultday[k8s]), for docker stacks only.
            import docker  # type: ignore[import-untyped]  # noqa: PLC0415
        except ImportError as exc:
            raise StackError("the docker driver needs faultday[k8s] (the docker SDK)") from exc
        kw: dict[str, Any] = {"version": self.api_version, "timeout": self.timeout}
        try:
            if self.base_url:
                return docker.DockerClient(base_url=self.base_url, **kw)
            env = dict(os.environ)
            if self.docker_host:  # the engine the stack was created on, not today's default
                env["DOCKER_HOST"] = self.docker_host
            return docker.from_env(environment=env, **kw)
        except docker.errors.DockerException as exc:
            raise StackError(f"no Docker engine: {exc}") from exc


class DeployMode(StrEnum):
    DEPLOY = "deploy"  # apply the rendered manifests, delete them at the end
    ATTACH = "attach"  # the user's stack is already running: touch nothing at up/down


class EndpointMode(StrEnum):
    SERVICE = "service"  # cluster DNS names: the harness runs in the cluster
    PORT_FORWARD = "port-forward"  # `kubectl port-forward` per Service, on 127.0.0.1


class LoadPlacement(StrEnum):
    JOBS = "jobs"  # Locust master + N workers as Kubernetes Jobs in the namespace
    HARNESS = "harness"  # Locust processes beside the harness (as with the process driver)


class LoadJobsConfig(_Strict):
    """Where the scenario's load runs on Kubernetes, and how its pods reach the harness."""

    placement: LoadPlacement = LoadPlacement.JOBS
    sink_bind: str = Field(
        default="127.0.0.1",
        description="address the harness' event socket binds (0.0.0.0 to accept pods)",
    )
    sink_port: int = Field(default=0, ge=0, le=65535, description="0 = any free port")
    sink_advertise: str = Field(
        default="",
        description="host or host:port the load pods dial for the event socket; "
        "default: sink_bind and the bound port",
    )
    endpoints: dict[str, str] = Field(
        default_factory=dict,
        description="component → URL the load pods use; default the in-cluster Service DNS name",
    )
    image: str = Field(default="ghcr.io/faultday/faultday:latest", min_length=1)
    finish_timeout: Duration = Field(
        default=60.0, description="after the run, wait this long for the Jobs to complete"
    )


class KubernetesConfig(_Strict):
    """Where a profile runs on Kubernetes, and the blast radius of its faults."""

    namespace: str = Field(default="faultday", pattern=DNS_LABEL, max_length=63)
    allowed_namespaces: tuple[str, ...] = Field(
        default=(), description="namespaces faults may touch; empty = only `namespace`"
    )
    mode: DeployMode = DeployMode.DEPLOY
    part_of: str = Field(default="", description="label value; default faultday-<profile>")
    access: ClusterAccess = ClusterAccess()
    ready_timeout: Duration = Field(default=600.0, description="wait for Deployments this long")
    endpoints: EndpointMode = EndpointMode.SERVICE
    endpoint_overrides: dict[str, str] = Field(
        default_factory=dict, description="component → URL (Ingress, NodePort); wins over both"
    )
    proxy_overrides: dict[str, str] = Field(
        default_factory=dict, description="component → its Toxiproxy sidecar's API URL"
    )
    gpu_node_label: str = Field(
        default="nvidia.com/gpu.present=true", description="node_gpu_loss only touches these"
    )
    load: LoadJobsConfig = Field(
        default_factory=LoadJobsConfig, description="distributed load: Locust as Jobs"
    )

    def namespaces(self) -> frozenset[str]:
        return frozenset(self.allowed_namespaces or (self.namespace,))

    def part_of_for(self, profile_name: str) -> str:
        return self.part_of or part_of_value(profile_name)


class KubernetesTarget(_Strict):
    """The file form: ``apiVersion: faultday/v1, kind: KubernetesTarget, spec: {...}``."""

    api_version: Literal["faultday/v1"] = Field(alias="apiVersion")
    kind: Literal["KubernetesTarget"]
    spec: KubernetesConfig

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def load_config(path: Path) -> KubernetesConfig:
    """Read a KubernetesTarget file; ScenarioError with ``file:line:col`` for every problem."""
    doc = parse_file(path)
    try:
        return KubernetesTarget.model_validate(doc.data).spec
    except ValidationError as exc:
        raise ScenarioError(validation_problems(doc, exc)) from exc


def config_with(base: KubernetesConfig, **changes: Any) -> KubernetesConfig:
    """A copy with CLI overrides applied (None = keep), re-validated."""
    data = base.model_dump()
    data.update({k: v for k, v in changes.items() if v is not None})
    return KubernetesConfig.model_validate(data)

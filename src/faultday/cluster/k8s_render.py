"""A stack profile as Kubernetes manifests: the kubernetes driver's ``deploy`` mode applies
them and ``faultday stack render --driver k8s`` writes them.

One Deployment and one Service per component, on the official images
(``official_images``). There is no proxy Deployment: each edge's destination runs a
Toxiproxy sidecar and its Service points at the sidecar, so every connection to a
dependency crosses a proxy faultday can break.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NotRequired, TypedDict

import yaml

from faultday.cluster.embedder_model import CONFIG_PBTXT, MODEL_PY
from faultday.cluster.official_images import (
    LLM_TYPES,
    READINESS_PATHS,
    TOXIPROXY_API_PORT,
    TOXIPROXY_IMAGE,
    OfficialImages,
    official_ports,
)
from faultday.core.components import ProbeKind
from faultday.core.profile import Edge, StackProfile
from faultday_wire.webguard import ALLOWED_HOSTS_ENV

MANIFEST_FILE = "stack.yaml"
CLUSTER_DOMAIN = ".svc.cluster.local"

# -- the objects' shape (the fields faultday writes) ----------------------------------------

Labels = dict[str, str]


class ObjectMeta(TypedDict):
    name: str
    labels: Labels


class HttpGetAction(TypedDict):
    path: str
    port: int


class TcpSocketAction(TypedDict):
    port: int


class Probe(TypedDict):
    httpGet: NotRequired[HttpGetAction]
    tcpSocket: NotRequired[TcpSocketAction]
    periodSeconds: int
    failureThreshold: NotRequired[int]


class ContainerPort(TypedDict):
    name: str
    containerPort: int


class ResourceRequirements(TypedDict):
    requests: dict[str, str]
    limits: NotRequired[dict[str, int]]


class EnvVar(TypedDict):
    name: str
    value: str


class VolumeMount(TypedDict):
    name: str
    mountPath: str


class Container(TypedDict):
    name: str
    image: str
    args: NotRequired[list[str]]
    command: NotRequired[list[str]]
    ports: list[ContainerPort]
    volumeMounts: NotRequired[list[VolumeMount]]
    readinessProbe: Probe
    resources: ResourceRequirements
    env: NotRequired[list[EnvVar]]


class KeyToPath(TypedDict):
    key: str
    path: str


class ConfigMapVolumeSource(TypedDict):
    name: str
    items: NotRequired[list[KeyToPath]]


class Volume(TypedDict):
    name: str
    configMap: ConfigMapVolumeSource


class Toleration(TypedDict):
    key: str
    operator: str
    effect: str


class PodSpec(TypedDict):
    containers: list[Container]
    nodeSelector: NotRequired[dict[str, str]]
    tolerations: NotRequired[list[Toleration]]
    volumes: NotRequired[list[Volume]]


class PodTemplateMeta(TypedDict):
    labels: Labels


class PodTemplate(TypedDict):
    metadata: PodTemplateMeta
    spec: PodSpec


class LabelSelector(TypedDict):
    matchLabels: Labels


class DeploymentSpec(TypedDict):
    replicas: int
    selector: LabelSelector
    template: PodTemplate


class Deployment(TypedDict):
    apiVersion: Literal["apps/v1"]
    kind: Literal["Deployment"]
    metadata: ObjectMeta
    spec: DeploymentSpec


class ServicePort(TypedDict):
    name: str
    port: int
    targetPort: int


class ServiceSpec(TypedDict):
    selector: Labels
    ports: list[ServicePort]


class Service(TypedDict):
    apiVersion: Literal["v1"]
    kind: Literal["Service"]
    metadata: ObjectMeta
    spec: ServiceSpec


class ConfigMap(TypedDict):
    apiVersion: Literal["v1"]
    kind: Literal["ConfigMap"]
    metadata: ObjectMeta
    data: dict[str, str]


Manifest = ConfigMap | Deployment | Service

# -- rendering ------------------------------------------------------------------------------


def _labels(component: str, profile: str) -> Labels:
    return {"app.kubernetes.io/name": component, "app.kubernetes.io/part-of": f"faultday-{profile}"}


def _readiness_probe(images: OfficialImages, component: str) -> Probe:
    kind = images.component_type(component)
    port = images.port(component).number
    spec = images.profile.probe(component)
    if kind in READINESS_PATHS:
        return _http_probe(READINESS_PATHS[kind], port)
    if spec.kind == ProbeKind.HTTP and kind not in ("redis", "proxy"):
        return _http_probe(spec.path, port)
    return {"tcpSocket": {"port": port}, "periodSeconds": 2, "failureThreshold": 60}


def _http_probe(path: str, port: int) -> Probe:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": 2, "failureThreshold": 60}


def _configmap(name: str, labels: Labels, data: dict[str, str]) -> ConfigMap:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }


def _toxiproxy_sidecar(images: OfficialImages, edges: list[Edge]) -> Container:
    ports: list[ContainerPort] = [
        {"name": f"edge-{images.edge_port[e.name]}", "containerPort": images.edge_port[e.name]}
        for e in edges
    ]
    ports.append({"name": "toxiproxy", "containerPort": TOXIPROXY_API_PORT})
    return {
        "name": "toxiproxy",
        "image": TOXIPROXY_IMAGE,
        "args": ["-host=0.0.0.0", "-config=/config/toxiproxy.json"],
        "ports": ports,
        "volumeMounts": [{"name": "toxiproxy", "mountPath": "/config"}],
        "readinessProbe": {
            "httpGet": {"path": "/version", "port": TOXIPROXY_API_PORT},
            "periodSeconds": 2,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
    }


def _main_container(images: OfficialImages, component: str) -> Container:
    kind = images.component_type(component)
    container: Container = {
        "name": component,
        "image": images.image(component),
        "ports": [
            {"name": p.name, "containerPort": p.number}
            for p in official_ports(images.profile, component)
        ],
        "readinessProbe": _readiness_probe(images, component),
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
        # The harness calls faultday's admin routes by cluster DNS name; their browser
        # guard accepts only the names listed here (docs/security.md).
        "env": [{"name": ALLOWED_HOSTS_ENV, "value": CLUSTER_DOMAIN}],
    }
    command = images.command(component, k8s=True)
    if kind in LLM_TYPES:
        container["args"] = command
    elif command:
        container["command"] = command
    if kind == "triton":
        container["volumeMounts"] = [{"name": "models", "mountPath": "/models/embedder"}]
    if images.gpu(component):
        container["resources"]["limits"] = {"nvidia.com/gpu": 1}
    return container


def _component_manifests(
    images: OfficialImages, component: str, edges_in: list[Edge]
) -> list[Manifest]:
    """The component's ConfigMaps, Deployment and Service; ``edges_in`` end at it."""
    kind = images.component_type(component)
    labels = _labels(component, images.profile.name)
    out: list[Manifest] = []
    volumes: list[Volume] = []
    if kind == "triton":
        items: list[KeyToPath] = [
            {"key": "config.pbtxt", "path": "config.pbtxt"},
            {"key": "model.py", "path": "1/model.py"},
        ]
        volumes.append(
            {"name": "models", "configMap": {"name": f"{component}-model", "items": items}}
        )
    pod: PodSpec = {"containers": [_main_container(images, component)]}
    if images.gpu(component):
        pod["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
        pod["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    service_ports: list[ServicePort] = [
        {"name": p.name, "port": p.number, "targetPort": p.number}
        for p in official_ports(images.profile, component)
    ]
    if edges_in:
        pod["containers"].append(_toxiproxy_sidecar(images, edges_in))
        volumes.append({"name": "toxiproxy", "configMap": {"name": f"{component}-toxiproxy"}})
        config = images.toxiproxy_config(edges_in, upstream_host="127.0.0.1")
        out.append(_configmap(f"{component}-toxiproxy", labels, {"toxiproxy.json": config}))
        for e in edges_in:
            port = images.edge_port[e.name]
            service_ports.append({"name": f"edge-{port}", "port": port, "targetPort": port})
        service_ports.append(
            {"name": "toxiproxy", "port": TOXIPROXY_API_PORT, "targetPort": TOXIPROXY_API_PORT}
        )
    if volumes:
        pod["volumes"] = volumes
    if kind == "triton":
        data = {"config.pbtxt": CONFIG_PBTXT, "model.py": MODEL_PY}
        out.append(_configmap(f"{component}-model", labels, data))
    out.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": component, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        }
    )
    out.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": component, "labels": labels},
            "spec": {"selector": labels, "ports": service_ports},
        }
    )
    return out


def manifests(profile: StackProfile) -> list[Manifest]:
    """Every object of ``profile``'s stack, in the order they are written."""
    profile = profile.without_collector()  # no trace wiring on Kubernetes yet (docs/traces.md)
    images = OfficialImages(profile)
    edges_by_destination: dict[str, list[Edge]] = {}
    for e in images.edges:
        edges_by_destination.setdefault(e.dst, []).append(e)
    out: list[Manifest] = []
    for component in profile.spec.components:
        if images.component_type(component) == "proxy":
            continue  # sidecars carry the edges on Kubernetes
        edges_in = edges_by_destination.get(component, [])
        out += _component_manifests(images, component, edges_in)
    return out


def write_manifests(profile: StackProfile, *, out: Path) -> list[Path]:
    """Write ``stack.yaml`` (every manifest) into ``out``; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    f = out / MANIFEST_FILE
    f.write_text(
        f"# Rendered by `faultday stack render --driver k8s` from {profile.name}.\n"
        + yaml.safe_dump_all(manifests(profile), sort_keys=False)
    )
    return [f]

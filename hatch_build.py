"""Build hook: compile the proxy's native relay (src/faultday/proxy/relay.c).

The relay is one small C file with no dependency beyond libc, loaded with
ctypes; no extension-module machinery is needed. Without a C compiler the
build still succeeds and the proxy relays in Python (it says so at start).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("src/faultday/proxy/relay.c")
TARGET = "faultday/proxy/_relay.so"
CFLAGS = ["-O2", "-Wall", "-shared", "-fPIC", "-pthread"]


def compile_relay(root: Path, out: Path) -> bool:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    argv = [*cc.split()[:1], *CFLAGS, "-o", str(out), str(root / SOURCE)]
    if shutil.which(argv[0]) is None:
        print(
            f"faultday: no C compiler ({argv[0]}): the proxy will relay in Python", file=sys.stderr
        )
        return False
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        print(f"faultday: native relay not built: {done.stderr.strip()}", file=sys.stderr)
        return False
    return True


class NativeRelayHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        if version == "editable":
            compile_relay(root, root / "src" / TARGET)
            return
        self._tmp = Path(tempfile.mkdtemp(prefix="faultday-relay-"))
        out = self._tmp / "_relay.so"
        if compile_relay(root, out):
            build_data["force_include"][str(out)] = TARGET
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        # The wheel holds its copy of the relay by now; the compile folder goes.
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

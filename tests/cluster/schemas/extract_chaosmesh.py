"""Regenerate the vendored Chaos Mesh schemas from a chaos-mesh/chaos-mesh checkout.

Usage: python extract_chaosmesh.py <chaos-mesh checkout>/config/crd/bases <commit>
Keeps each CRD's openAPIV3Schema minus descriptions, ``status`` and the spec
properties faultday never sets, so the files stay small and reviewable.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

KEEP = {
    "networkchaos": {
        "action",
        "mode",
        "value",
        "selector",
        "direction",
        "target",
        "delay",
        "loss",
        "duplicate",
        "corrupt",
        "bandwidth",
        "duration",
        "externalTargets",
    },
    "podchaos": {
        "action",
        "mode",
        "value",
        "selector",
        "containerNames",
        "duration",
        "gracePeriod",
    },
    "stresschaos": {"mode", "value", "selector", "containerNames", "duration", "stressors"},
}


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def main(bases: Path, commit: str) -> None:
    for kind, keep in KEEP.items():
        crd = yaml.safe_load((bases / f"chaos-mesh.org_{kind}.yaml").read_text())
        version = crd["spec"]["versions"][0]
        schema = _strip(version["schema"]["openAPIV3Schema"])
        schema["properties"].pop("status", None)
        spec = schema["properties"]["spec"]
        spec["properties"] = {k: v for k, v in spec["properties"].items() if k in keep}
        spec["required"] = [r for r in spec.get("required", []) if r in keep]
        schema["x-source"] = (
            f"chaos-mesh/chaos-mesh@{commit} config/crd/bases/chaos-mesh.org_{kind}.yaml "
            f"({crd['spec']['group']}/{version['name']} {crd['spec']['names']['kind']}); "
            "descriptions, status and unused spec properties removed"
        )
        out = Path(__file__).with_name(f"{kind}.json")
        out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])

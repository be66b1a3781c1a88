"""The JSON Schema of the scenario format, for editors (yaml-language-server)."""

from __future__ import annotations

import json
from typing import Any

from faultday.core.durations import format_duration
from faultday.core.scenario import Scenario

SCHEMA_ID = "https://faultday.dev/schema/scenario.schema.json"


def scenario_schema() -> dict[str, Any]:
    schema = Scenario.model_json_schema(by_alias=True, mode="validation")
    # A check item is written flat in YAML ({check: latency, metric: ttft, max: 1.5s});
    # its own keys belong to the check and are validated by faultday, not the editor.
    check = schema["$defs"]["CheckSpec"]
    check["properties"].pop("params", None)
    check["additionalProperties"] = True
    _durations_as_written(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "faultday scenario (v1)"
    return schema


def _durations_as_written(node: object) -> None:
    """A duration's default as a user writes it ("1s"), not as Python keeps it (1.0)."""
    if isinstance(node, dict):
        if isinstance(node.get("default"), int | float) and _is_duration(node):
            node["default"] = format_duration(node["default"])
        for value in node.values():
            _durations_as_written(value)
    elif isinstance(node, list):
        for value in node:
            _durations_as_written(value)


def _is_duration(node: dict[str, Any]) -> bool:
    branches = [node, *node.get("anyOf", ())]
    return any(b.get("type") == "string" and "pattern" in b for b in branches)


def schema_text() -> str:
    return json.dumps(scenario_schema(), indent=2, sort_keys=True) + "\n"

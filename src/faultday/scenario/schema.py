"""The JSON Schema of the scenario format, for editors (yaml-language-server)."""

from __future__ import annotations

import json
from typing import Any

from faultday.scenario.models import Scenario

SCHEMA_ID = "https://faultday.dev/schema/scenario.schema.json"


def scenario_schema() -> dict[str, Any]:
    schema = Scenario.model_json_schema(by_alias=True, mode="validation")
    # A check item is written flat in YAML ({check: latency, metric: ttft, max: 1.5s});
    # its own keys belong to the check and are validated by faultday, not the editor.
    check = schema["$defs"]["CheckSpec"]
    check["properties"].pop("params", None)
    check["additionalProperties"] = True
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "faultday scenario (v1)"
    return schema


def schema_text() -> str:
    return json.dumps(scenario_schema(), indent=2, sort_keys=True) + "\n"

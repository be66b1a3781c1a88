"""The scenario format (v1): models, YAML loader with positions, JSON Schema."""

from faultday.core.scenario import CheckSpec, Fault, LoadSpec, Metadata, Scenario, ScenarioSpec

__all__ = ["CheckSpec", "Fault", "LoadSpec", "Metadata", "Scenario", "ScenarioSpec"]

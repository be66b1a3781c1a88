"""Fault injectors, one module per fault family, registered as ``faultday.injectors``."""

from faultday.core.targets import Revert, Target, TargetKind
from faultday.injectors.base import FaultContext, Injector, NoParams, injector_registry

__all__ = [
    "FaultContext",
    "Injector",
    "NoParams",
    "Revert",
    "Target",
    "TargetKind",
    "injector_registry",
]

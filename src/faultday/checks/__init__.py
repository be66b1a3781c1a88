"""Checks: assertions over a window of a run, registered as ``faultday.checks``."""

from faultday.checks.base import Check, CheckContext, check_registry
from faultday.core.windows import CheckResult, Verdict, Window

__all__ = ["Check", "CheckContext", "CheckResult", "Verdict", "Window", "check_registry"]

"""Checks: assertions over a window of a run, registered as ``faultday.checks``."""

from faultday.checks.base import Check, CheckContext, CheckResult, Verdict, Window, check_registry

__all__ = ["Check", "CheckContext", "CheckResult", "Verdict", "Window", "check_registry"]

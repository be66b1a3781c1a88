"""Windows and verdicts: the spans of run time a check judges, and what it says."""

from __future__ import annotations

from dataclasses import dataclass

from faultday.core.vocab import Verdict, WindowKind

__all__ = ["CheckResult", "Verdict", "Window", "WindowKind"]


@dataclass(frozen=True, slots=True)
class Window:
    """A span of run time (seconds from t=0) that a check looks at."""

    kind: WindowKind
    label: str
    start: float
    end: float
    fault: str = ""

    @property
    def length(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class CheckResult:
    check: str
    label: str
    window: str
    verdict: Verdict
    expected: str = ""
    observed: str = ""
    n: int = 0
    message: str = ""

    def describe(self) -> str:
        """``during xid79: latency ttft p99 expected ≤ 1.5s, observed 4.2s (n=812)``."""
        text = f"{self.window}: {self.label}"
        if self.expected:
            text += f" expected {self.expected}"
        if self.observed:
            text += f", observed {self.observed}"
        text += f" (n={self.n})"
        if self.message:
            text += f" — {self.message}"
        return text

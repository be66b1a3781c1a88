"""What every preflight area reads (the stack as it runs, its profile, the settings) and
how it says what it found (a ``JournalCheck`` in section ``preflight``, so the run
reports' renderers show it unchanged)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from faultday.core.journal import JournalCheck
from faultday.core.preflight import PreflightSpec
from faultday.core.profile import StackProfile
from faultday.core.stackinfo import ComponentInfo, StackInfo
from faultday.core.vocab import Section, Verdict
from faultday.core.yamlpos import Document, PathKey, dotted, parse_file
from faultday.errors import ScenarioError


class Area(StrEnum):
    """What a preflight check looks at: the report's "window" column."""

    INTERFACE = "interface"
    RESOURCES = "resources"
    CONFIG = "config"
    LOGS = "logs"


@dataclass(frozen=True, slots=True)
class Subject:
    """The stack under preflight: what runs (``info``), what was asked for (``profile``)."""

    profile: StackProfile
    info: StackInfo
    spec: PreflightSpec
    base_dir: Path
    folder: Path  # the preflight's own folder (a log command's output is saved there)

    def components(self, *types: str) -> list[ComponentInfo]:
        return [c for c in self.info.components if not types or c.type in types]

    def settings(self, component: str) -> dict[str, object]:
        spec = self.profile.spec.components.get(component)
        return dict(spec.settings) if spec is not None else {}

    def profile_doc(self) -> Document | None:
        """The profile file with positions (None for a packaged or unreadable one)."""
        if not self.profile.source:
            return None
        try:
            return parse_file(Path(self.profile.source))
        except ScenarioError:  # positions are a nicety; the check still says the field
            return None

    def where_in_profile(self, path: PathKey) -> str:
        """``file:line:col field`` of a place in the profile (its nearest ancestor)."""
        doc = self.profile_doc()
        if doc is None:
            return f"{self.profile.name}: {dotted(path)}"
        pos = doc.pos(path)
        return f"{doc.file}:{pos.line}:{pos.col} {dotted(path)}"


def check(
    area: Area,
    name: str,
    label: str,
    *,
    ok: bool | None,
    expected: str = "",
    observed: str = "",
    where: str = "",
    message: str = "",
    n: int = 1,
) -> JournalCheck:
    """One preflight result; ``ok=None`` is INSUFFICIENT (could not be judged)."""
    verdict = Verdict.INSUFFICIENT if ok is None else Verdict.PASSED if ok else Verdict.FAILED
    text = " — ".join(x for x in (where, message) if x)
    return JournalCheck(
        section=Section.PREFLIGHT,
        check=name,
        label=label,
        window=area.value,
        verdict=verdict,
        expected=expected,
        observed=observed,
        n=n,
        message=text,
    )


def error(area: Area, name: str, label: str, message: str) -> JournalCheck:
    """A check that could not run (the harness' fault, not the stack's)."""
    return JournalCheck(
        section=Section.PREFLIGHT,
        check=name,
        label=label,
        window=area.value,
        verdict=Verdict.ERROR,
        message=message,
    )

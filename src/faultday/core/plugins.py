"""Plugins by short name, from entry-point groups.

Entry points are read, never discovered by importing every module; an entry
whose module cannot be imported (an optional extra missing) is reported as
unavailable rather than breaking the others.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from faultday.errors import FaultdayError

T = TypeVar("T")

INJECTORS = "faultday.injectors"
CHECKS = "faultday.checks"
DRIVERS = "faultday.drivers"
REPORTERS = "faultday.reporters"


def did_you_mean(word: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """Return ``; did you mean 'x'?`` for the closest choice, or a list of valid ones."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; valid: {', '.join(sorted(choices))}" if choices else ""


@dataclass(frozen=True, slots=True)
class PluginInfo:
    name: str
    target: str
    available: bool
    summary: str


class Registry(Generic[T]):
    """Short name → plugin class, loaded lazily from one entry-point group."""

    def __init__(self, group: str, kind: str) -> None:
        self.group = group
        self.kind = kind
        self._eps = {ep.name: ep for ep in entry_points(group=group)}
        self._cache: dict[str, type[T]] = {}

    def names(self) -> list[str]:
        return sorted(self._eps)

    def __contains__(self, name: object) -> bool:
        return name in self._eps

    def get(self, name: str) -> type[T]:
        if name in self._cache:
            return self._cache[name]
        ep = self._eps.get(name)
        if ep is None:
            raise FaultdayError(f"unknown {self.kind} {name!r}{did_you_mean(name, self.names())}")
        try:
            cls: type[T] = ep.load()
        except ImportError as exc:
            raise FaultdayError(
                f"{self.kind} {name!r} is unavailable: {exc} (install faultday[stack] or [k8s])"
            ) from exc
        self._cache[name] = cls
        return cls

    def describe(self) -> list[PluginInfo]:
        infos = []
        for name in self.names():
            try:
                cls = self.get(name)
            except FaultdayError as exc:
                infos.append(PluginInfo(name, self._eps[name].value, False, str(exc)))
                continue
            summary = getattr(cls, "summary", "") or (cls.__doc__ or "").strip().split("\n")[0]
            infos.append(PluginInfo(name, self._eps[name].value, True, summary))
        return infos

"""A service's YAML config file, read so that each problem names its ``file:line:col``.

PyYAML's composer records a mark on every node; the values are built from the
node tree here so each one keeps its position, and so a duplicate key is an
error (PyYAML keeps the last one silently). Reading is bounded: a regular file
of at most ``MAX_FILE_BYTES``, at most ``MAX_VALUES`` values once aliases are
expanded, nesting at most ``MAX_DEPTH`` deep.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from faultday_refstack.errors import ConfigError
from faultday_wire.durations import shown
from faultday_wire.problems import Problem

PathKey = tuple[str | int, ...]

MAX_FILE_BYTES = 256 * 1024
MAX_VALUES = 2_500
MAX_DEPTH = 64


@dataclass(slots=True)
class Document:
    """A parsed file: its value and the ``(line, col)`` of each path in it."""

    file: str
    data: object = None
    marks: dict[PathKey, tuple[int, int]] = field(default_factory=dict)

    def problem(self, path: PathKey, message: str) -> Problem:
        """A problem at ``path``, or at its nearest ancestor that has a position."""
        for cut in range(len(path), -1, -1):
            if path[:cut] in self.marks:
                line, col = self.marks[path[:cut]]
                return Problem(self.file, line, col, dotted(path), message)
        return Problem(self.file, 1, 1, dotted(path), message)


def dotted(path: PathKey) -> str:
    """``("policies", "default", "timeouts")`` → ``policies.default.timeouts``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        # A key with a control character must not colour, or rewrite, the terminal.
        text = part if part.isprintable() else repr(part)
        out += f".{text}" if out else text
    return out


class _Build:
    def __init__(self, doc: Document, loader: yaml.SafeLoader) -> None:
        self.doc, self.loader = doc, loader
        self.count = 0
        self.problems: list[Problem] = []

    def value(self, node: yaml.Node, path: PathKey) -> object:
        self.count += 1
        if self.count > MAX_VALUES or len(path) > MAX_DEPTH:
            what = f"more than {MAX_VALUES:,} values" if self.count > MAX_VALUES else "nesting"
            raise ConfigError([self.doc.problem(path, f"{what}: past this file's limits")])
        self.doc.marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.value(item, (*path, i)) for i, item in enumerate(node.value)]
        try:
            return self.loader.construct_object(node, deep=True)
        except (ValueError, TypeError, ArithmeticError, LookupError) as exc:
            raise ConfigError([self.doc.problem(path, "cannot read this value")]) from exc

    def mapping(self, node: yaml.MappingNode, path: PathKey) -> dict[str, object]:
        out: dict[str, object] = {}
        for key_node, value_node in node.value:
            key = str(self.loader.construct_object(key_node, deep=True))
            if key in out:
                line = self.doc.marks[(*path, key)][0]
                where = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                self.problems.append(
                    Problem(self.doc.file, *where, dotted((*path, key)),
                            f"duplicate key {shown(key)} (first at line {line})")
                )  # fmt: skip
                continue
            out[key] = self.value(value_node, (*path, key))
        return out


def _read(path: Path) -> str:
    name = str(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigError([Problem(name, 1, 1, "", "not a regular file")])
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError([Problem(name, 1, 1, "", f"cannot read: {exc.strerror}")]) from exc
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError([Problem(name, 1, 1, "", f"larger than {MAX_FILE_BYTES // 1024} KiB")])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(name, 1, 1, "", f"not UTF-8 text: {exc.reason}")]) from exc


def parse_file(path: Path) -> Document:
    """Read and parse one YAML document; any problem is a ConfigError with positions."""
    doc = Document(file=str(path))
    text = _read(path)
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters right here
        node = loader.get_single_node()
        if node is None:
            raise ConfigError([Problem(doc.file, 1, 1, "", "the file is empty")])
        build = _Build(doc, loader)
        doc.data = build.value(node, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = " ".join(s for s in (exc.context, exc.problem) if s)
        raise ConfigError([Problem(doc.file, line, col, "", f"YAML: {what}")]) from exc
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError([Problem(doc.file, 1, 1, "", f"YAML: {exc}")]) from exc
    finally:
        if loader is not None:
            loader.dispose()
    if build.problems:
        raise ConfigError(build.problems)
    return doc


def _step(current: object, part: str | int) -> tuple[bool, object]:
    """One step into the data: (found, the value there)."""
    if isinstance(current, dict) and isinstance(part, str) and part in current:
        return True, current[part]
    if isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
        return True, current[part]
    return False, None


def validation_problems(doc: Document, exc: ValidationError) -> list[Problem]:
    """A pydantic ValidationError as positioned problems (validator tags left out)."""
    problems = []
    for err in exc.errors(include_url=False):
        path: PathKey = ()
        current = doc.data
        for part in err["loc"]:
            # pydantic adds union and validator tags (``function-after[...]``) that are not
            # in the file: follow the location through the data and keep what is there.
            found, value = _step(current, part)
            if found:
                current, path = value, (*path, part)
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "missing":
            message = f"missing required key {err['loc'][-1]!r}"
        elif err["type"] == "extra_forbidden":
            message = "unknown key"
        problems.append(doc.problem(path, message))
    return problems

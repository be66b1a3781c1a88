"""YAML with positions: every value and key keeps its ``line:col``.

PyYAML's composer already records a mark on every node; we build plain Python
values from the node tree ourselves so that each one can be traced back to
its place in the file, and so duplicate keys are errors (PyYAML silently keeps
the last one). No library offers both, hence this small module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

import yaml
from pydantic import BaseModel, ValidationError

from faultday.errors import Problem, ScenarioError
from faultday.plugins import did_you_mean

PathKey = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Pos:
    line: int
    col: int


@dataclass(slots=True)
class Document:
    """A parsed YAML document: its value and where each part of it stands."""

    file: str
    data: object
    values: dict[PathKey, Pos] = field(default_factory=dict)
    keys: dict[PathKey, Pos] = field(default_factory=dict)

    def pos(self, path: PathKey, *, key: bool = False) -> Pos:
        """The position of ``path``, or of its nearest ancestor that has one."""
        table = self.keys if key else self.values
        for cut in range(len(path), -1, -1):
            sub = path[:cut]
            if sub in table:
                return table[sub]
            if sub in self.values:
                return self.values[sub]
        return Pos(1, 1)

    def problem(self, path: PathKey, message: str, *, key: bool = False) -> Problem:
        p = self.pos(path, key=key)
        return Problem(self.file, p.line, p.col, dotted(path), message)


def dotted(path: PathKey) -> str:
    """``("spec", "faults", 0, "with", "xid")`` → ``spec.faults[0].with.xid``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _mark(node: yaml.Node) -> Pos:
    return Pos(node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    def __init__(self, doc: Document, loader: yaml.SafeLoader) -> None:
        self.doc = doc
        self.loader = loader
        self.problems: list[Problem] = []

    def build(self, node: yaml.Node, path: PathKey) -> object:
        self.doc.values[path] = _mark(node)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self.loader.construct_object(node, deep=True)

    def _mapping(self, node: yaml.MappingNode, path: PathKey) -> dict[str, object]:
        out: dict[str, object] = {}
        for key_node, value_node in node.value:
            key = self.loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                key = str(key)
            sub = (*path, key)
            if key in out:
                first = self.doc.keys[sub]
                m = _mark(key_node)
                self.problems.append(
                    Problem(
                        self.doc.file,
                        m.line,
                        m.col,
                        dotted(sub),
                        f"duplicate key {key!r} (first at line {first.line})",
                    )
                )
                continue
            self.doc.keys[sub] = _mark(key_node)
            out[key] = self.build(value_node, sub)
        return out


def parse_text(text: str, *, file: str) -> Document:
    """Parse one YAML document; raise ScenarioError with positions on any problem."""
    doc = Document(file=file, data=None)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError([Problem(file, 1, 1, "", "the file is empty")])
        builder = _Builder(doc, loader)
        doc.data = builder.build(node, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = " ".join(s for s in (exc.context, exc.problem) if s)
        raise ScenarioError([Problem(file, line, col, "", f"YAML syntax error: {what}")]) from exc
    except yaml.YAMLError as exc:
        raise ScenarioError([Problem(file, 1, 1, "", f"YAML error: {exc}")]) from exc
    finally:
        loader.dispose()
    if builder.problems:
        raise ScenarioError(builder.problems)
    return doc


def parse_file(path: Path) -> Document:
    """Read and parse a YAML file; a missing or unreadable file is a ScenarioError too."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ScenarioError([Problem(str(path), 1, 1, "", "no such file")]) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError([Problem(str(path), 1, 1, "", f"cannot read: {exc}")]) from exc
    return parse_text(text, file=str(path))


def _clean_loc(loc: tuple[str | int, ...]) -> PathKey:
    # pydantic inserts validator tags ("function-after[...]") and our CheckSpec
    # gathers free keys under "params"; neither exists in the user's file.
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p == "params")))


def _keys_at(model: type[BaseModel], path: PathKey) -> list[str]:
    """The keys a model accepts at ``path`` (aliases as written in YAML), for did-you-mean."""
    current: object = model
    for part in path:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        by_key = {(f.alias or n): f for n, f in current.model_fields.items()}
        field = by_key.get(part)
        if field is None:
            return []
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _model_in(annotation: object) -> object:
    # Optional[X], tuple[X, ...], list[X]: the model inside, if any.
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def validation_problems(
    doc: Document,
    exc: ValidationError,
    *,
    prefix: PathKey = (),
    model: type[BaseModel] | None = None,
) -> list[Problem]:
    """Turn a pydantic ValidationError into positioned problems."""
    problems = []
    for err in exc.errors(include_url=False):
        path = (*prefix, *_clean_loc(tuple(err["loc"])))
        kind = err["type"]
        msg = str(err["msg"])
        if kind == "extra_forbidden":
            keys = _keys_at(model, path[len(prefix) : -1]) if model is not None else []
            hint = did_you_mean(str(path[-1]), keys) if keys else ""
            problems.append(doc.problem(path, f"unknown key{hint}", key=True))
            continue
        if kind == "missing":
            problems.append(doc.problem(path[:-1], f"missing required key {path[-1]!r}"))
            continue
        msg = msg.removeprefix("Value error, ")
        problems.append(doc.problem(path, msg))
    return problems

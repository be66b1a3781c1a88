"""YAML with positions: every value and key keeps its ``line:col``.

PyYAML's composer already records a mark on every node; we build plain Python
values from the node tree ourselves so that each one can be traced back to
its place in the file, and so duplicate keys are errors (PyYAML silently keeps
the last one). No library offers both, hence this small module.

Every file a user hands faultday is read through here, and reading it is
bounded (the ``MAX_*`` below; docs/scenarios.md lists them): only regular
files (never a device, a FIFO or a folder), at most ``MAX_FILE_BYTES``;
nesting, the number of values (aliases expanded: no "billion laughs"), keys
and strings are capped too. A breach, a recursive alias, a control character
or a value PyYAML cannot build is a ScenarioError with ``file:line:col``,
never a traceback or a hang.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from faultday.core.durations import shown
from faultday.core.plugins import did_you_mean
from faultday.errors import ScenarioError
from faultday_wire.problems import Problem

PathKey = tuple[str | int, ...]

# PyYAML's pure-Python scanner reads about a character a microsecond and parses a
# value in 50-100 us: 256 KiB and 2,500 values keep the worst file at a few tenths of a
# second. The largest file faultday ships (a Kubernetes stack) has 21 KiB and 300 values;
# a scenario at the model's own limits (50 faults, 50 checks a section) about 1,100.
MAX_FILE_BYTES = 256 * 1024
MAX_DEPTH = 64
MAX_VALUES = 2_500
MAX_KEY_CHARS = 1024
MAX_STRING_CHARS = 64 * 1024


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

    def at(self, path: PathKey) -> object:
        """The value at ``path``, or None where the data has no such place."""
        current = self.data
        for part in path:
            found, current = _step(current, part)
            if not found:
                return None
        return current


_MISSING = object()


def _step(current: object, part: str | int) -> tuple[bool, object]:
    """One step into the data: (found, the value there)."""
    if isinstance(current, dict) and isinstance(part, str) and part in current:
        return True, current[part]
    if isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
        return True, current[part]
    return False, _MISSING


def dotted(path: PathKey) -> str:
    """``("spec", "faults", 0, "with", "xid")`` → ``spec.faults[0].with.xid``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{printable(part)}" if out else printable(part)
    return out


def printable(text: str) -> str:
    """``text`` as is, or quoted with escapes when it holds a control or format character
    (a key with ESC in it must not colour, or rewrite, the user's terminal)."""
    return text if text.isprintable() else repr(text)


def _mark(node: yaml.Node) -> Pos:
    return Pos(node.start_mark.line + 1, node.start_mark.column + 1)


class _Limit(Exception):
    """A bound was passed, or a value cannot be built: always turned into a Problem."""

    def __init__(self, mark: Any, message: str, path: PathKey = ()) -> None:  # a yaml Mark
        super().__init__(message)
        self.pos = Pos(mark.line + 1, mark.column + 1) if mark is not None else Pos(1, 1)
        self.message = message
        self.path = path


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer counts what it builds, so depth and size are bounded."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.composed = 0

    def fetch_flow_collection_start(self, token_class: type[yaml.Token]) -> None:
        # The scanner reads ahead up to 1,024 characters to find out whether a "[" starts
        # a key, at a cost that grows with the flow depth: stop it early.
        if self.flow_level >= MAX_DEPTH:
            raise _Limit(self.get_mark(), f"nested deeper than {MAX_DEPTH} levels")
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        self.composed += 1  # an alias too: it stands for at least one value
        if self.composed > MAX_VALUES:
            raise _Limit(event.start_mark, f"more than {MAX_VALUES:,} values in one file")
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_STRING_CHARS:
            raise _Limit(
                event.start_mark,
                f"a string of {len(event.value):,} characters; the limit is {MAX_STRING_CHARS:,}",
            )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Limit(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _Builder:
    def __init__(self, doc: Document, loader: yaml.SafeLoader) -> None:
        self.doc = doc
        self.loader = loader
        self.problems: list[Problem] = []
        self.built = 0
        self.open: set[int] = (
            set()
        )  # ids of the collections being built: a cycle = a recursive alias

    def build(self, node: yaml.Node, path: PathKey) -> object:
        self.doc.values[path] = _mark(node)
        self.built += 1
        if self.built > MAX_VALUES:
            raise _Limit(
                node.start_mark,
                f"more than {MAX_VALUES:,} values once aliases are expanded",
                path,
            )
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if len(path) > MAX_DEPTH:
            raise _Limit(node.start_mark, f"nested deeper than {MAX_DEPTH} levels", path)
        if id(node) in self.open:
            raise _Limit(
                node.start_mark, "a recursive alias: this value contains itself (*alias)", path
            )
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _scalar(self, node: yaml.ScalarNode, path: PathKey) -> object:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, AttributeError, ArithmeticError, LookupError) as exc:
            # PyYAML builds ints, floats and dates with Python's own constructors and
            # trusts explicit tags: 2023-02-30, a 5000-digit number or "!!bool maybe"
            # raise plain ValueErrors and KeyErrors.
            why = str(exc).split(";")[0]  # Python's advice on its own limits is not for the user
            if isinstance(exc, LookupError) or not why:
                why = f"not a valid {node.tag.rsplit(':', 1)[-1]}"
            raise _Limit(node.start_mark, f"cannot read this value: {why}", path) from exc

    def _mapping(self, node: yaml.MappingNode, path: PathKey) -> dict[str, object]:
        out: dict[str, object] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Limit(
                    key_node.start_mark,
                    "a key must be a plain value such as a name, not a list or a mapping",
                    path,
                )
            key = self._scalar(key_node, path)
            if not isinstance(key, str):
                key = str(key)
            if len(key) > MAX_KEY_CHARS:
                raise _Limit(
                    key_node.start_mark,
                    f"a key of {len(key):,} characters; the limit is {MAX_KEY_CHARS:,}",
                    path,
                )
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
                        f"duplicate key {shown(key)} (first at line {first.line})",
                    )
                )
                continue
            self.doc.keys[sub] = _mark(key_node)
            out[key] = self.build(value_node, sub)
        return out


def _text_pos(text: str, index: int) -> Pos:
    index = max(0, min(index, len(text)))
    line = text.count("\n", 0, index) + 1
    return Pos(line, index - (text.rfind("\n", 0, index) + 1) + 1)


def parse_text(text: str, *, file: str) -> Document:
    """Parse one YAML document; raise ScenarioError with positions on any problem."""
    doc = Document(file=file, data=None)
    builder: _Builder | None = None
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # the reader rejects control characters right here
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError([Problem(file, 1, 1, "", "the file is empty")])
        builder = _Builder(doc, loader)
        doc.data = builder.build(node, ())
    except _Limit as exc:
        raise ScenarioError(
            [Problem(file, exc.pos.line, exc.pos.col, dotted(exc.path), exc.message)]
        ) from None
    except yaml.reader.ReaderError as exc:
        p = _text_pos(text, exc.position)
        what = (
            f"the control character U+{exc.character:04X} is not allowed in YAML; remove it, "
            f'or write it as an escape in a double-quoted string ("\\u{exc.character:04x}")'
            if isinstance(exc.character, int)
            else str(exc.reason)
        )
        raise ScenarioError([Problem(file, p.line, p.col, "", what)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = " ".join(s for s in (exc.context, exc.problem) if s)
        raise ScenarioError([Problem(file, line, col, "", f"YAML syntax error: {what}")]) from None
    except yaml.YAMLError as exc:
        raise ScenarioError([Problem(file, 1, 1, "", f"YAML error: {exc}")]) from None
    except RecursionError:  # a last word: the limits above keep nesting far from it
        raise ScenarioError(
            [Problem(file, 1, 1, "", f"nested too deeply; the limit is {MAX_DEPTH} levels")]
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
    if builder is not None and builder.problems:
        raise ScenarioError(builder.problems)
    return doc


def read_text(path: Path, *, limit: int = MAX_FILE_BYTES) -> str:
    """A user's text file, read safely: a regular file, at most ``limit`` bytes, UTF-8.

    Opened without blocking (a FIFO would wait for a writer forever) and checked
    with fstat before a byte is read (``/dev/zero`` never ends); every failure
    is a ScenarioError at ``file:1:1``, or at the undecodable byte.
    """
    name = str(path) if len(str(path)) <= 4096 else shown(str(path), 200)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ScenarioError([Problem(name, 1, 1, "", "no such file")]) from None
    except OSError as exc:
        raise ScenarioError([Problem(name, 1, 1, "", f"cannot read: {exc.strerror}")]) from None
    except ValueError:  # a NUL byte in the path
        raise ScenarioError(
            [Problem(shown(name), 1, 1, "", "cannot read: the path contains a NUL byte")]
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = "a folder" if stat.S_ISDIR(info.st_mode) else "a device, FIFO or socket"
            raise ScenarioError([Problem(name, 1, 1, "", f"not a regular file: {what}")])
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ScenarioError([Problem(name, 1, 1, "", f"cannot read: {exc.strerror}")]) from None
    finally:
        os.close(fd)
    if size > limit:
        raise ScenarioError(
            [Problem(name, 1, 1, "", f"the file is larger than the limit of {_size(limit)}")]
        )
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        head = data[: exc.start].decode("utf-8", errors="replace")
        p = _text_pos(head, len(head))
        raise ScenarioError(
            [Problem(name, p.line, p.col, "", f"not UTF-8 text: byte 0x{data[exc.start]:02x}")]
        ) from None


def _size(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n:,} bytes"


def parse_file(path: Path) -> Document:
    """Read and parse a YAML file; a missing or unreadable file is a ScenarioError too."""
    return parse_text(read_text(path), file=str(path))


def _clean_loc(doc: Document, prefix: PathKey, loc: tuple[str | int, ...], kind: str) -> PathKey:
    """pydantic's error location as a path in the user's file.

    pydantic inserts validator and union tags (``function-after[...]``, ``int``)
    and our CheckSpec gathers free keys under ``params``; none of them is in the
    file. The location is followed through the data itself, so a user's key that
    looks like a tag (``a[0]``) is still a key; only a missing key, the last part
    of a ``missing`` error, is kept without being found.
    """
    current = doc.at(prefix)
    out: list[str | int] = []
    for i, part in enumerate(loc):
        found, value = _step(current, part)
        if found:
            current = value
            out.append(part)
        elif kind == "missing" and i == len(loc) - 1:
            out.append(part)
    return tuple(out)


def _keys_at(model: type[BaseModel], path: PathKey) -> list[str]:
    """The keys a model accepts at ``path`` (aliases as written in YAML), for did-you-mean."""
    found = _model_at(model, path)
    return [f.alias or n for n, f in found.model_fields.items()] if found else []


def _model_at(model: type[BaseModel], path: PathKey) -> type[BaseModel] | None:
    """The model that describes the mapping at ``path``, if any."""
    current: object = model
    named = False  # the part before was a mapping of models: this part is a user's name
    for part in path:
        if isinstance(part, int) or named:
            named = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        by_key = {(f.alias or n): f for n, f in current.model_fields.items()}
        field = by_key.get(part)
        if field is None:
            return None
        current = _model_in(field.annotation)
        named = _is_mapping(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current
    return None


def _bounds_at(model: type[BaseModel] | None, path: PathKey) -> str:
    """A number field's bounds as a person reads them (``≥ 0.5 and < 1``), or ''."""
    parent = _model_at(model, path[:-1]) if model is not None and path else None
    if parent is None:
        return ""
    by_key = {(f.alias or n): f for n, f in parent.model_fields.items()}
    field = by_key.get(str(path[-1]))
    if field is None:
        return ""
    signs = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
    return " and ".join(
        f"{sign} {getattr(m, name):g}"
        for m in field.metadata
        for name, sign in signs
        if isinstance(getattr(m, name, None), int | float)
    )


def _is_mapping(annotation: object) -> bool:
    # dict[str, X] or Optional[dict[str, X]]: its keys are names, not fields.
    if get_origin(annotation) is dict:
        return True
    return any(_is_mapping(a) for a in get_args(annotation) if a is not type(None))


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
        kind = err["type"]
        path = (*prefix, *_clean_loc(doc, prefix, tuple(err["loc"]), kind))
        msg = str(err["msg"])
        if kind in ("extra_forbidden", "missing") and len(path) == len(prefix):
            problems.append(doc.problem(path, msg))  # no key to name: say it where we are
            continue
        if kind == "extra_forbidden":
            keys = _keys_at(model, path[len(prefix) : -1]) if model is not None else []
            hint = did_you_mean(str(path[-1]), keys) if keys else ""
            problems.append(doc.problem(path, f"unknown key{hint}", key=True))
            continue
        if kind == "missing":
            problems.append(doc.problem(path[:-1], f"missing required key {path[-1]!r}"))
            continue
        not_finite = _not_finite(err["input"]) if kind in _NUMBER_ERRORS else None
        if not_finite is not None:
            bounds = _bounds_at(model, path[len(prefix) :]) or _bound(kind, err)
            expected = f"expected a finite number{f' {bounds}' if bounds else ''}"
            problems.append(doc.problem(path, f"{not_finite}; {expected}"))
            continue
        msg = msg.removeprefix("Value error, ")
        problems.append(doc.problem(path, msg))
    return problems


# pydantic's errors for a number out of its bounds or not finite: for NaN they say
# "should be less than or equal to 1", true of no NaN and no help.
_NUMBER_ERRORS = {
    "finite_number": "",
    "greater_than": "> {gt}",
    "greater_than_equal": "≥ {ge}",
    "less_than": "< {lt}",
    "less_than_equal": "≤ {le}",
}


def _not_finite(value: object) -> str | None:
    """What is wrong with a NaN or an infinity (YAML's .nan, .inf, 1e999), else None."""
    try:
        number = float(value) if isinstance(value, int | float | str) else 0.0
    except (ValueError, OverflowError):
        return None
    # A float came from YAML: name it as YAML writes it (.nan, .inf, -.inf).
    text = shown(value) if not isinstance(value, float) else str(value).replace("nan", ".nan")
    text = text.replace("inf", ".inf") if isinstance(value, float) else text
    if math.isnan(number):
        return f"{text} is not a number"
    if math.isinf(number):
        return f"{text} is infinite (or too large for a number)"
    return None


def _bound(kind: str, err: Any) -> str:
    """The bound pydantic's error names (none for finite_number)."""
    return _NUMBER_ERRORS[kind].format(**err["ctx"]) if err.get("ctx") else ""


def by_position(problems: list[Problem]) -> list[Problem]:
    """Problems in reading order: by file, then line and column (pydantic's order is the
    model's fields', which jumps about the file)."""
    return sorted(problems, key=lambda p: (p.file, p.line, p.col))

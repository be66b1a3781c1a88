"""Hostile journals and a live-markup finder for report tests.

Every string a journal carries is replaced, field by field as the pydantic model
declares them, by a payload naming its own path; a field added to the model later is
poisoned without anyone listing it here.
"""

from __future__ import annotations

import re
from enum import Enum
from html.parser import HTMLParser
from typing import TypeVar

from markdown_it import MarkdownIt
from markdown_it.token import Token
from pydantic import BaseModel, JsonValue

M = TypeVar("M", bound=BaseModel)

# Tags a faultday Markdown document renders to; anything else came from quoted text.
MARKDOWN_TAGS = frozenset(
    {"h1", "h2", "h3", "p", "br", "hr", "em", "strong", "s", "code", "pre", "ul", "ol", "li"}
    | {"table", "thead", "tbody", "tr", "th", "td", "a", "img"}
)


def payload(path: str) -> str:
    """Text that is live markup wherever it is quoted unescaped; it names the field it sits in."""
    return (
        f"javascript:alert('{path}')//<script>alert('{path}')</script>"
        f"<img src=x onerror=alert('{path}')> [a](javascript:alert(1)) ![i](javascript:alert(2))"
        " <https://evil.example> `c` | **b** _e_ ~~s~~ &lt;b&gt; \\\n# h\n- li\n````\n<b>x</b>"
    )


def marker(path: str) -> str:
    """The part of :func:`payload` a reader must still see, as text."""
    return f"<script>alert('{path}')</script>"


def poison_json(value: JsonValue, path: str) -> JsonValue:
    """The same JSON shape with every string (and every mapping key of data) hostile."""
    if isinstance(value, str):
        return payload(path)
    if isinstance(value, list):
        return [poison_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: poison_json(v, f"{path}.{k}") for k, v in value.items()}
    return value


def poison(model: M, path: str = "") -> M:
    """A copy of ``model`` with every string field, list item and mapping value hostile."""
    update: dict[str, object] = {}
    for name in type(model).model_fields:
        where = f"{path}.{name}" if path else name
        update[name] = _poison_value(getattr(model, name), where)
    return type(model).model_validate({**model.model_dump(), **update})


def _poison_value(value: object, where: str) -> object:
    if isinstance(value, Enum):
        return value  # a vocabulary the code owns (verdicts), not quoted text
    if isinstance(value, BaseModel):
        return poison(value, where).model_dump()
    if isinstance(value, str):
        return payload(where)
    if isinstance(value, list):
        return [_poison_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {k: _poison_value(v, f"{where}.{k}") for k, v in value.items()}
        out[payload(f"{where}.key")] = payload(f"{where}.value")
        return out
    return value


def _parser() -> MarkdownIt:
    # HTML on, as CommonMark's reference renderer, wikis and code hosts have it.
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def blocks(markdown: str) -> list[Token]:
    """The block tokens of a document (paragraph_open, inline, fence, table_open, …)."""
    return _parser().parse(markdown)


def tokens(markdown: str) -> list[Token]:
    """Every token of a document, nested ones included, as a renderer that passes HTML sees it."""
    out: list[Token] = []
    todo = _parser().parse(markdown)
    while todo:
        tok = todo.pop(0)
        out.append(tok)
        todo[:0] = tok.children or []
    return out


def live_markup(markdown: str, *, links: str = r"^$") -> list[str]:
    """Raw HTML, links and images that quoted text made; ``links`` matches the allowed targets."""
    found = []
    for tok in tokens(markdown):
        if tok.type in ("html_block", "html_inline"):
            found.append(f"{tok.type}: {tok.content[:80]!r}")
        target = str(tok.attrGet("href") or tok.attrGet("src") or "")
        if tok.type in ("link_open", "image") and not re.search(links, target):
            found.append(f"{tok.type}: {target[:80]!r}")
    return found


def inline_text(markdown: str) -> str:
    """The text of a one-line document, as a reader sees it (escapes and entities resolved)."""
    return "".join(t.content for t in tokens(markdown) if t.type in ("text", "code_inline"))


def visible_text(markdown: str) -> str:
    """What a reader sees: text, code spans and code blocks, escapes resolved."""
    return "\n".join(
        tok.content
        for tok in tokens(markdown)
        if tok.type in ("text", "code_inline", "fence", "code_block")
    )


class TagCollector(HTMLParser):
    """Tags and attributes of an HTML document, for a whitelist check."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def html_tags(html: str) -> TagCollector:
    parser = TagCollector()
    parser.feed(html)
    parser.close()
    return parser


def rendered_markdown_problems(markdown: str, *, links: str = r"^$") -> list[str]:
    """Tags outside Markdown's own, event-handler attributes and script URLs, once rendered."""
    bad = []
    for tag, attrs in html_tags(_parser().render(markdown)).tags:
        if tag not in MARKDOWN_TAGS:
            bad.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                bad.append(f"<{tag} {name}>")
            if name in ("href", "src") and not re.search(links, value or ""):
                bad.append(f"<{tag} {name}={value!r}>")
    return bad

"""Markdown output that quotes untrusted text safely: escaping, code spans, fences, jinja2.

Many Markdown renderers pass raw HTML through (CommonMark's default, wikis, code
hosts), so a scenario title ``<script>…`` quoted as is would run there. Every value
a Markdown template prints is escaped here unless it is already Markdown we made:

* :func:`inline` for prose and table cells: no tag, entity, link, image, emphasis,
  code span, table cell break or new block can come out of the text;
* :func:`code` for a code span, :func:`fence` for a fenced block: the text cannot
  close them early, and inside them nothing is markup.

:func:`environment` makes a jinja2 environment that applies :func:`inline` to every
``{{ … }}`` by default, so a field a template adds later cannot forget it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import jinja2
from markdown_it import MarkdownIt
from markupsafe import Markup

# Line breaks of CommonMark (\r, \n) plus those Python's str.splitlines() honours: a
# quoted value stays on its line for every tool that reads the file line by line.
_BREAKS = re.compile(r"\s*[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]+\s*")
# Always escaped: they open code spans, emphasis, strikethrough, links, images and
# table cells anywhere in a line ("!" only matters before "[", which is escaped).
_PUNCT = re.compile(r"[\\`*\[\]~|]")
# "_" between two word characters never starts emphasis (CommonMark §6.2), so
# snake_case names stay readable; elsewhere it is escaped.
_LOOSE_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
# "&" only when it would form an entity reference; "AT&T" stays as written.
_ENTITY = re.compile(r"&(?=#?[0-9A-Za-z]+;)")
# What opens a block at the start of a line: heading, quote, list item, thematic
# break or setext underline. ">" inside a line is harmless (it cannot open a tag).
_BLOCK_START = re.compile(r"^(?:#{1,6}(?=[ \t]|$)|>|[-+](?=[ \t]|$)|[-=](?=[-= \t]*$))")
_ORDERED = re.compile(r"^(\d{1,9})([.)])(?=[ \t]|$)")


def one_line(value: object) -> str:
    """The text on one line, trimmed."""
    return _BREAKS.sub(" ", str(value)).strip()


def inline(value: object) -> str:
    """Markdown source that shows ``value`` as plain text, on one line and in one table cell."""
    text = _PUNCT.sub(lambda m: "\\" + m.group(), one_line(value))
    text = _LOOSE_UNDERSCORE.sub(r"\\_", text)
    text = _ENTITY.sub("&amp;", text).replace("<", "&lt;")
    text = _BLOCK_START.sub(lambda m: "\\" + m.group(), text)
    return _ORDERED.sub(r"\1\\\2", text)


def _longest_run(text: str, char: str = "`") -> int:
    return max((len(m) for m in re.findall(f"{re.escape(char)}+", text)), default=0)


def code(value: object) -> str:
    """``value`` on one line in code spans, safe in a table cell too.

    GFM splits a table row at every unescaped ``|``, inside code spans too; so each
    ``|`` is written as an escaped ``\\|`` between two code spans, which reads the
    same in a table and outside one.
    """
    return "\\|".join(_span(part) for part in one_line(value).split("|"))


def _span(text: str) -> str:
    if not text:
        return ""
    ticks = "`" * (_longest_run(text) + 1)
    # A span that starts or ends with a backtick needs a space between it and the fence;
    # CommonMark strips exactly one space on each side again.
    pad = " " if text[0] == "`" or text[-1] == "`" else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(value: object, lang: str = "") -> str:
    """A fenced code block that the text cannot close early."""
    text = str(value).rstrip("\n")
    ticks = "`" * max(3, _longest_run(text) + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _finalize(value: object) -> Markup:
    # Markup here means "Markdown we made": template text, macro output and the
    # filters below. Anything else is quoted text and is escaped.
    if isinstance(value, Markup):
        return value
    return Markup(inline(value))  # noqa: S704 - escaped for Markdown


def _made(func: Callable[..., str]) -> Callable[..., Markup]:
    def wrapped(value: object, *args: str) -> Markup:
        return Markup(func(value, *args))  # noqa: S704 - the function escapes for Markdown

    return wrapped


def environment(loader_dir: Path) -> jinja2.Environment:
    """A jinja2 environment for Markdown templates that escapes every printed value.

    It borrows jinja2's autoescape machinery, with Markdown escaping (``finalize``) in
    place of HTML escaping: template text, macros and ``caller()`` count as trusted,
    printed values do not. Filters: ``md`` (escape, explicitly), ``code`` (code span),
    ``fence`` (fenced block), and jinja2's ``safe`` for Markdown this module made.
    Never render HTML with it: its ``Markup`` holds Markdown, not HTML.
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(loader_dir),
        undefined=jinja2.StrictUndefined,
        autoescape=True,  # with _finalize below: Markdown escaping, not HTML escaping
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(md=_made(inline), code=_made(code), fence=_made(fence))
    return env


def markdown_html(text: str) -> str:
    """Markdown → HTML; raw HTML in the text is escaped, never passed through."""
    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
    return str(md.render(text))

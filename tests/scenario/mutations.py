"""A generated corpus of broken scenario files, for ``test_mutations.py``.

Every case starts from a real scenario in ``scenarios/`` and breaks it one way,
with a fixed seed: bytes flipped, control characters, lines deleted, doubled or
swapped, nesting thousands deep, recursive and billion-laughs aliases, huge
strings, lists and numbers, keys that look like pydantic's own locations
(``a[0]``), device files, FIFOs and folders as the stack profile, NaN and
infinite thresholds, shares outside [0, 1], sample intervals below 250 ms and
durations in non-ASCII digits. Nothing is hand-picked: the mutators are drawn
round-robin, the source file and every detail by the case's own RNG.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "scenarios").glob("*.scenario.yaml"))
SEED = 15
CASES = 204

# Where a case's own folder goes in its text (a FIFO, a folder, a symlink loop made for it).
HERE = "@@HERE@@"


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    source: Path
    data: bytes
    setup: str = ""  # "fifo", "dir", "loop": special files the text points at (HERE/…)
    as_fifo: bool = False  # the scenario file itself is a FIFO

    def text_for(self, here: Path) -> bytes:
        return self.data.replace(HERE.encode(), str(here).encode())


Mutator = Callable[[str, random.Random], "bytes | tuple[bytes, str]"]


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _some_line(text: str, rng: random.Random, *, content: bool = True) -> int:
    lines = _lines(text)
    picks = [i for i, ln in enumerate(lines) if ln.strip() and not ln.startswith("#")]
    return rng.choice(picks if content and picks else range(len(lines)))


def _replace_value(text: str, key: str, value: str, rng: random.Random) -> str:
    """Put ``value`` after one ``key:`` (block or flow); add it under spec when absent."""
    spots = [m for m in re.finditer(rf"(?<![\w-]){re.escape(key)}: *", text)]
    if not spots:
        return text.replace("\nspec:\n", f"\nspec:\n  {key}: {value}\n", 1)
    m = rng.choice(spots)
    end = m.end()
    block = text[text.rfind("\n", 0, m.start()) + 1 : m.start()].strip() in ("", "-")
    return text[:end] + value + text[_value_end(text, end, block=block) :]


def _value_end(text: str, start: int, *, block: bool) -> int:
    """Where the value at ``start`` ends: its closing bracket, else the end of the line
    (block style) or the next , or } (flow style)."""
    if block and text[start : start + 1] not in ("[", "{"):
        stop = text.find("\n", start)
        return len(text) if stop < 0 else stop
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c in "[{":
            depth += 1
        elif c in "]}" and depth:
            depth -= 1
            if depth == 0:
                return i + 1
        elif depth == 0 and c in ",}\n":
            return i
    return len(text)


# ------------------------------------------------------------------ bytes and lines


def flip_bits(text: str, rng: random.Random) -> bytes:
    data = bytearray(text.encode())
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    return bytes(data)


def control_byte(text: str, rng: random.Random) -> bytes:
    data = bytearray(text.encode())
    bad = [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]
    data.insert(rng.randrange(len(data)), rng.choice(bad))
    return bytes(data)


def invalid_utf8(text: str, rng: random.Random) -> bytes:
    data = bytearray(text.encode())
    i = rng.randrange(len(data))
    data[i:i] = rng.choice([b"\xff", b"\xfe\xff", b"\xc3", b"\x80", b"\xed\xa0\x80"])
    return bytes(data)


def delete_line(text: str, rng: random.Random) -> bytes:
    lines = _lines(text)
    del lines[_some_line(text, rng)]
    return "".join(lines).encode()


def duplicate_line(text: str, rng: random.Random) -> bytes:
    lines = _lines(text)
    i = _some_line(text, rng)
    lines.insert(i, lines[i])
    return "".join(lines).encode()


def swap_lines(text: str, rng: random.Random) -> bytes:
    lines = _lines(text)
    i, j = _some_line(text, rng), _some_line(text, rng)
    lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines).encode()


def truncate(text: str, rng: random.Random) -> bytes:
    return text.encode()[: rng.randrange(len(text))]


def shift_indent(text: str, rng: random.Random) -> bytes:
    lines = _lines(text)
    i = _some_line(text, rng)
    lines[i] = " " * rng.choice([1, 3, 5]) + lines[i] if rng.random() < 0.5 else lines[i][1:]
    return "".join(lines).encode()


def tab_indent(text: str, rng: random.Random) -> bytes:
    lines = _lines(text)
    indented = [i for i, ln in enumerate(lines) if ln.startswith("  ")] or [0]
    i = rng.choice(indented)
    lines[i] = "\t" + lines[i].lstrip(" ")
    return "".join(lines).encode()


def line_endings(text: str, rng: random.Random) -> bytes:
    choice = rng.choice(["crlf", "cr", "bom", "nel", "u2028"])
    if choice == "crlf":
        return text.replace("\n", "\r\n").encode()
    if choice == "cr":
        return text.replace("\n", "\r").encode()
    if choice == "bom":
        return b"\xef\xbb\xbf" + text.encode()
    sep = "\u0085" if choice == "nel" else "\u2028"
    return text.replace("\n", sep, rng.randint(1, 5)).encode()


def junk_tail(text: str, rng: random.Random) -> bytes:
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
    return text.encode() + junk


def documents(text: str, rng: random.Random) -> bytes:
    return rng.choice(
        [
            text + "---\n" + text,
            "--- !!str\n" + text,
            "%YAML 1.1\n---\n" + text,
            "%YAML 9.9\n---\n" + text,
            "%TAG ! tag:x,2000:\n---\n" + text,
            "",
            "\n\n   \n",
            "# only a comment\n",
            "...\n",
            "---\n...\n",
        ]
    ).encode()


# ------------------------------------------------------------------ structure


def deep_nesting(text: str, rng: random.Random) -> bytes:
    n = rng.choice([65, 200, 1000, 5000, 20_000])
    kind = rng.choice(["flow-list", "flow-map", "block"])
    if kind == "flow-list":
        value = "[" * n + "]" * n
    elif kind == "flow-map":
        value = "{a: " * n + "1" + "}" * n
    else:
        n = min(n, 3000)  # an indentation level costs two bytes a line: keep under the size limit
        value = "\n" + "".join(f"{'  ' * (i + 2)}k{i}:\n" for i in range(n)) + "  " * (n + 2) + "x"
    key = rng.choice(["tags", "title", "body", "with", "description"])
    return _replace_value(text, key, value, rng).encode()


def recursive_alias(text: str, rng: random.Random) -> bytes:
    value = rng.choice(["&t [a, *t]", "&m {x: *m}", "&l [[[*l]]]", "&k {a: [b, {c: *k}]}"])
    key = rng.choice(["tags", "with", "body", "labels", "fails"])
    return _replace_value(text, key, value, rng).encode()


def billion_laughs(text: str, rng: random.Random) -> bytes:
    levels = rng.randint(4, 10)
    anchors = "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, levels)
    )
    use = rng.choice(["top", "tags"])
    if use == "top":
        return text.replace("\nspec:", "\n" + anchors + "spec:", 1).encode()
    return (anchors + _replace_value(text, "tags", f"*a{levels - 1}", rng)).encode()


def undefined_or_odd_alias(text: str, rng: random.Random) -> bytes:
    value = rng.choice(["*nope", "&a x", "&a &b x", "*", "&", "!!merge <<", "[*a, &a 1]"])
    key = rng.choice(["title", "stack", "duration", "users"])
    out = _replace_value(text, key, value, rng)
    if rng.random() < 0.5:
        out = out.replace("\nspec:\n", "\nspec:\n  <<: {stack: local}\n", 1)
    return out.encode()


def many_aliases(text: str, rng: random.Random) -> bytes:
    n = rng.choice([1000, 6000, 40_000])
    value = "[" + ", ".join(["*t"] * n) + "]"
    out = _replace_value(text, "tags", "&t [x]", rng)
    return out.replace("\nspec:", f"\nextra: {value}\nspec:", 1).encode()


def huge_string(text: str, rng: random.Random) -> bytes:
    n = rng.choice([1_001, 10_001, 70_000, 300_000, 1_000_000])
    char = rng.choice(["a", "é", "中", "😀", " ", "\\t"])
    quoted = rng.choice(["", '"', "'"])
    body = char * n
    if quoted == "" and char in (" ", "\\t"):
        body = "x" + body + "x"
    key = rng.choice(["title", "description", "stack", "policy", "target", "check", "runbook"])
    return _replace_value(text, key, f"{quoted}{body}{quoted}", rng).encode()


def huge_list(text: str, rng: random.Random) -> bytes:
    n = rng.choice([65, 101, 201, 700, 5_000, 20_000])
    what = rng.choice(["faults", "expect", "tags", "fails"])
    if what == "faults":
        items = "".join(
            f"    - {{name: f{i}, inject: http_error, target: agent->llm-primary, "
            f"at: 30s, duration: 50s, with: {{status: 503}}}}\n"
            for i in range(n)
        )
        return re.sub(r"\n  faults:\n", lambda _: "\n  faults:\n" + items, text, count=1).encode()
    if what == "expect":
        items = "    - {check: error_rate, max: 0.05}\n" * n
        if "\n  expect:\n" in text:
            return text.replace("\n  expect:\n", "\n  expect:\n" + items, 1).encode()
        return (text.rstrip("\n") + "\n  expect:\n" + items).encode()
    return _replace_value(
        text, what, "[" + ", ".join(f"t{i}" for i in range(n)) + "]", rng
    ).encode()


def weird_key(text: str, rng: random.Random) -> bytes:
    key = rng.choice(
        [
            "foo[0",
            "a[0]",
            "function-after[x]",
            "params",
            "[a]",
            "{b}",
            "'q'",
            '"d"',
            "? c",
            "k" * 2_000,
            "é[",
            "-",
            "1",
            "null",
            "true",
            "2023-02-30",
            "!!binary aGVsbG8=",
            "<<",
            "? [a, b]",
            "? {a: 1}",
            '"[/a]"',
            '"[bold]b[/bold]"',
            "'[link=file:///etc]x'",
        ]
    )
    lines = _lines(text)
    keyed = [i for i, ln in enumerate(lines) if re.match(r"^\s*[\w-]+:", ln)]
    i = rng.choice(keyed)
    indent = re.match(r"^\s*", lines[i]).group(0)  # type: ignore[union-attr]
    lines.insert(i, f"{indent}{key}: 1\n")
    return "".join(lines).encode()


def odd_tags(text: str, rng: random.Random) -> bytes:
    value = rng.choice(
        [
            "!!python/object/apply:os.system ['true']",
            "!!python/name:os.system",
            "!!binary aGVsbG8=",
            "!!binary not-base64!",
            "!custom x",
            "!!set {a, b}",
            "!!omap [a: 1]",
            "!!float abc",
            "!!int 12a",
            "!!timestamp 2023-99-99",
            "!!null x",
            "!!bool maybe",
            "!!str",
            "!<tag:yaml.org,2002:int> 5",
        ]
    )
    key = rng.choice(["title", "stack", "duration", "users", "max", "tags"])
    return _replace_value(text, key, value, rng).encode()


def type_swap(text: str, rng: random.Random) -> bytes:
    value = rng.choice(["[]", "{}", "~", "true", "-1", "0", "[1, 2]", "{a: b}", '""', "''"])
    key = rng.choice(
        ["metadata", "spec", "load", "faults", "steady_state", "expect", "naive", "name", "at"]
    )
    return _replace_value(text, key, value, rng).encode()


def bad_date(text: str, rng: random.Random) -> bytes:
    value = rng.choice(["2023-02-30", "2023-13-01", "2023-00-10 25:61:61", "9999-12-31T23:59:60Z"])
    key = rng.choice(["at", "duration", "title", "max", "stack"])
    return _replace_value(text, key, value, rng).encode()


# ------------------------------------------------------------------ what would break a run


def special_stack(text: str, rng: random.Random) -> bytes | tuple[bytes, str]:
    value, setup = rng.choice(
        [
            ("/dev/zero", ""),
            ("/dev/null", ""),
            ("/dev/urandom", ""),
            ("/dev/stdin", ""),
            ("/proc/self/status", ""),
            ("/", ""),
            ("/etc", ""),
            (f"{HERE}/fifo.yaml", "fifo"),
            (f"{HERE}/folder.yaml", "dir"),
            (f"{HERE}/loop.yaml", "loop"),
            ('"a\\0b.yaml"', ""),
            ('"local\\0"', ""),
            ("x" * 300, ""),
            ("a/" * 3000 + "x.yaml", ""),
            ("../../../../../../../../etc/passwd", ""),
            ("~", ""),
            ("[]", ""),
            ("''", ""),
        ]
    )
    out = _replace_value(text, "stack", value, rng).encode()
    return (out, setup) if setup else out


def big_number(text: str, rng: random.Random) -> bytes:
    digits = "9" * rng.choice([20, 33, 400, 4_400, 5_000])
    unit = rng.choice(["", "s", "ms", "h", "us"])
    key = rng.choice(["duration", "at", "max", "min", "users", "spawn_rate", "recovery", "warmup"])
    sign = rng.choice(["", "-", "0.", "1e"])
    return _replace_value(text, key, f"{sign}{digits}{unit}", rng).encode()


def non_finite(text: str, rng: random.Random) -> bytes:
    value = rng.choice([".nan", ".NaN", ".inf", "-.inf", "+.Inf", "1e400", "-1e400", "nan", "inf"])
    key = rng.choice(["max", "min", "spawn_rate", "percentile", "knee_factor", "max_error_rate"])
    return _replace_value(text, key, value, rng).encode()


def tiny_sample_interval(text: str, rng: random.Random) -> bytes:
    value = rng.choice(["1us", "0s", "249ms", "249.999ms", "0.2499s", "0.004m", "250ms", "1s"])
    out = re.sub(r"load: \{", f"load: {{sample_interval: {value}, ", text, count=1)
    if out == text:
        out = text.replace("\nspec:\n", f"\nspec:\n  load: {{sample_interval: {value}}}\n", 1)
    return out.encode()


def share_out_of_range(text: str, rng: random.Random) -> bytes:
    check = rng.choice(["error_rate", "fallback_rate", "degraded_reason, reason: x", "recall"])
    bound = rng.choice(["max", "min"])
    value = rng.choice(["7", "-0.1", "1.5", "100", "1.0000001", "-0", "1"])
    item = f"    - {{check: {check}, {bound}: {value}}}\n"
    if "\n  steady_state:\n" in text:
        return text.replace("\n  steady_state:\n", "\n  steady_state:\n" + item, 1).encode()
    return text.replace("\nspec:\n", "\nspec:\n  steady_state:\n" + item, 1).encode()


def non_ascii_digits(text: str, rng: random.Random) -> bytes:
    table = rng.choice(
        [
            str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"),  # Arabic-Indic
            str.maketrans("0123456789", "０１２３４５６７８９"),  # full-width
            str.maketrans("0123456789", "०१२३४५६७८९"),  # Devanagari
            str.maketrans("0123456789", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗"),  # mathematical bold
        ]
    )
    spots = list(re.finditer(r"(?<=: )\d+(?:\.\d+)?(?:us|ms|s|m|h)\b", text))
    if not spots:
        return text.encode()
    m = rng.choice(spots)
    return (text[: m.start()] + m.group(0).translate(table) + text[m.end() :]).encode()


def odd_duration(text: str, rng: random.Random) -> bytes:
    value = rng.choice(
        [
            "30",
            "30 s",
            '"30s\\n"',
            "-5s",
            "1e3s",
            ".5s",
            "5.s",
            "5S",
            "5sec",
            "1_000s",
            "0x10s",
            "1:30",
            "'\\t30s'",
            "30s30s",
            '"30s\\u00a0"',
            "3O s",
            "١s",
        ]
    )
    key = rng.choice(["duration", "at", "warmup", "recovery", "for", "max", "opened_within"])
    return _replace_value(text, key, value, rng).encode()


def huge_file(text: str, rng: random.Random) -> bytes:
    size = rng.choice([256 * 1024 + 1, 400_000, 2_000_000])
    filler = rng.choice(["comment", "newlines", "spaces"])
    if filler == "comment":
        pad = "# " + "x" * size + "\n"
    elif filler == "newlines":
        pad = "\n" * size
    else:
        pad = " " * size + "\n"
    return (text + pad).encode() if rng.random() < 0.5 else (pad + text).encode()


def long_values_in_messages(text: str, rng: random.Random) -> bytes:
    """Values echoed in messages (unknown names, unknown targets): long, odd or both."""
    value = rng.choice(
        ["x" * 5_000, "é" * 900, "a\\u0000b", "'with spaces and: colons'", "🙂" * 500, '"[/red]"']
    )
    key = rng.choice(["inject", "check", "target", "during", "after", "policy", "workload"])
    return _replace_value(text, key, value, rng).encode()


def markup_and_escapes(text: str, rng: random.Random) -> bytes:
    """Keys and values that a terminal or a formatter could take for commands: printed as text."""
    odd = [
        '"[/x]"',
        '"[bold]b[/bold]"',
        '"[link=file:///etc/passwd]l[/link]"',
        "'\\[x]'",
        '"\\e[31mred\\e[0m"',
        '"\\u202eevil"',
        '"{0} %s %(x)s ${HOME} $(true)"',
        '"<script>x</script>"',
    ]
    rng.shuffle(odd)
    lines = _lines(text)
    keyed = [i for i, ln in enumerate(lines) if re.match(r"^\s*[\w-]+:", ln)]
    for key in odd[: rng.randint(3, len(odd))]:
        i = rng.choice(keyed)
        indent = re.match(r"^\s*", lines[i]).group(0)  # type: ignore[union-attr]
        lines.insert(i, f"{indent}{key}: {rng.choice(odd)}\n")
        keyed = [k + 1 if k >= i else k for k in keyed]
    return _replace_value("".join(lines), "title", rng.choice(odd), rng).encode()


MUTATORS: list[Mutator] = [
    flip_bits,
    control_byte,
    invalid_utf8,
    delete_line,
    duplicate_line,
    swap_lines,
    truncate,
    shift_indent,
    tab_indent,
    line_endings,
    junk_tail,
    documents,
    deep_nesting,
    recursive_alias,
    billion_laughs,
    undefined_or_odd_alias,
    many_aliases,
    huge_string,
    huge_list,
    weird_key,
    odd_tags,
    type_swap,
    bad_date,
    special_stack,
    big_number,
    non_finite,
    tiny_sample_interval,
    share_out_of_range,
    non_ascii_digits,
    odd_duration,
    huge_file,
    long_values_in_messages,
    markup_and_escapes,
]


def corpus(cases: int = CASES, seed: int = SEED) -> list[Case]:
    """The corpus: mutators round-robin, everything else drawn from a per-case RNG."""
    out = []
    for i in range(cases):
        rng = random.Random(f"{seed}-{i}")
        mutate = MUTATORS[i % len(MUTATORS)]
        source = rng.choice(SOURCES)
        made = mutate(source.read_text(encoding="utf-8"), rng)
        data, setup = made if isinstance(made, tuple) else (made, "")
        name = f"{i:03d}-{mutate.__name__}-{source.name.removesuffix('.scenario.yaml')}"
        out.append(Case(name, source, data, setup=setup, as_fifo=False))
    # The scenario file itself not a regular file: a FIFO and a folder named like one.
    out.append(Case("fifo-as-scenario", SOURCES[0], b"", as_fifo=True))
    out.append(Case("folder-as-scenario", SOURCES[0], b"", setup="self-dir"))
    return out

"""Tokens and text: a deterministic toy tokenizer, chat template, output text and tool calls.

Nothing here is a language model; it is just enough for a gateway or an agent
to see plausible, reproducible output: the same seed, version and prompt give
the same words, the same length and the same tool call.
"""

from __future__ import annotations

import json
import math
import random
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from faultday_refstack.llmsim.config import LengthDist, OutputLength, SimConfig, ToolSelect
from faultday_refstack.llmsim.protocol import FunctionDefinition, NamedToolChoice, ToolChoice
from faultday_wire.answers import cited, doc_marker

VOCAB_SIZE = 32000
# Roughly 4 characters a token, like BPE on English text.
_PIECE = re.compile(r"\s?[^\s]{1,4}|\s+")
_WORDS = [
    "the",
    "system",
    "degrades",
    "gracefully",
    "when",
    "a",
    "replica",
    "loses",
    "its",
    "accelerator",
    "and",
    "traffic",
    "moves",
    "to",
    "the",
    "backup",
    "while",
    "breakers",
    "open",
    "retries",
    "stay",
    "bounded",
    "and",
    "the",
    "queue",
    "drains",
    "latency",
    "rises",
    "then",
    "recovers",
    "because",
    "every",
    "fault",
    "is",
    "reverted",
    "the",
    "report",
    "lists",
    "what",
    "happened",
    "and",
    "which",
    "runbook",
    "step",
    "applies",
    "operators",
    "read",
    "the",
    "timeline",
    "compare",
    "the",
    "baseline",
    "with",
    "the",
    "window",
    "of",
    "the",
    "fault",
    "and",
    "decide",
    "whether",
    "the",
    "budget",
    "held",
    "model",
    "serving",
    "needs",
    "capacity",
    "headroom",
    "cache",
    "hit",
    "rates",
    "matter",
    "prefill",
    "dominates",
    "long",
    "prompts",
    "decode",
    "dominates",
    "long",
    "answers",
]


def tokenize(text: str) -> list[int]:
    return [zlib.crc32(p.encode()) % VOCAB_SIZE for p in _PIECE.findall(text)]


def count_tokens(text: str) -> int:
    return len(_PIECE.findall(text))


def detokenize_pieces(text: str) -> list[str]:
    """Split text into the pieces that stream as one token each."""
    return _PIECE.findall(text)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


def render_chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """A fixed chat template, so equal conversation prefixes share KV blocks."""
    parts = []
    if tools:
        parts.append("<|system|>tools:" + json.dumps(tools, sort_keys=True) + "<|end|>\n")
    for m in messages:
        role = str(m.get("role", "user"))
        body = _content_text(m.get("content"))
        if m.get("tool_calls"):
            body += json.dumps(m["tool_calls"], sort_keys=True)
        parts.append(f"<|{role}|>{body}<|end|>\n")
    parts.append("<|assistant|>")
    return "".join(parts)


def request_seed(config: SimConfig, prompt_ids: list[int], user_seed: int | None) -> int:
    """A stable seed for one request: the server seed, the model version, the prompt."""
    h = zlib.crc32(f"{config.seed}|{config.version}|{user_seed}".encode())
    return zlib.crc32(b"".join(t.to_bytes(2, "little") for t in prompt_ids[-512:]), h)


def sample_length(dist: OutputLength, rng: random.Random) -> int:
    if dist.dist == LengthDist.FIXED:
        n = dist.mean
    elif dist.dist == LengthDist.UNIFORM:
        half = dist.mean * (dist.sigma if dist.sigma > 0 else 0.5)
        n = rng.uniform(dist.mean - half, dist.mean + half)
    elif dist.dist == LengthDist.EXPONENTIAL:
        n = rng.expovariate(1.0 / dist.mean)
    else:
        mu = math.log(dist.mean) - dist.sigma**2 / 2  # so the mean is ``mean``
        n = rng.lognormvariate(mu, dist.sigma)
    return max(dist.min, min(dist.max, round(n)))


def context_markers(messages: list[dict[str, Any]]) -> tuple[str, ...]:
    """The ``[doc:ID]`` markers of the context a chat gives (not the model's own past answers)."""
    text = "\n".join(
        _content_text(m.get("content")) for m in messages if m.get("role") != "assistant"
    )
    return tuple(cited(text))


def prompt_markers(prompt: str) -> tuple[str, ...]:
    return tuple(cited(prompt))


# Where a grounded answer cites: its first citation among the first few tokens (a cut or
# short answer still carries one), a second a few tokens later when the answer is long enough.
_FIRST_CITE = (1, 4)
_CITE_GAP = (3, 8)


def cite_plan(seed: int, markers: tuple[str, ...], length: int) -> dict[int, str]:
    """Token position → the marker cited there: one or two of ``markers``, fixed by the seed."""
    if not markers or length < 1:
        return {}
    rng = random.Random(seed ^ 0x5EED)  # noqa: S311 - reproducible citations, not secrets
    chosen = rng.sample(markers, k=min(len(markers), rng.randint(1, 2)))
    plan: dict[int, str] = {}
    pos = min(length - 1, rng.randint(*_FIRST_CITE))
    for doc in chosen:
        if pos >= length or pos in plan:
            break
        plan[pos] = doc
        pos += rng.randint(*_CITE_GAP)
    return plan


class WordStream:
    """Deterministic words for one request, one token at a time.

    Given the document markers of its context, it cites some of them (``[doc:ID]``, one
    token each, in place of a word) as a grounded model would; the words around them and
    the number of tokens stay what they are without context.
    """

    __slots__ = ("_cites", "_pos", "_rng")

    def __init__(self, seed: int, *, markers: tuple[str, ...] = (), length: int = 0) -> None:
        self._rng = random.Random(seed)  # noqa: S311 - reproducible text, not secrets
        self._cites = cite_plan(seed, markers, length)
        self._pos = 0

    def next_piece(self) -> str:
        word = self._rng.choice(_WORDS)
        doc = self._cites.get(self._pos)
        self._pos += 1
        return " " + (doc_marker(doc) if doc is not None else word)


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: str


def _fake_value(schema: Any, key: str, rng: random.Random) -> Any:
    """A plausible argument value for a JSON-schema property (any JSON: schemas are untrusted)."""
    if not isinstance(schema, dict):
        schema = {}
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    makers: dict[str, Callable[[], Any]] = {
        "integer": lambda: rng.randint(1, 10),
        "number": lambda: round(rng.uniform(0, 10), 2),
        "boolean": lambda: True,
        "array": lambda: [_fake_value(schema.get("items") or {"type": "string"}, key, rng)],
        "object": dict,
    }
    make = makers.get(str(schema.get("type")))
    return make() if make is not None else f"{key} {rng.choice(_WORDS)}"


def _argument_names(params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A schema's properties and the names a call fills: ``required``, else every property."""
    props = params.get("properties")
    props = props if isinstance(props, dict) else {}
    required = params.get("required")
    if not isinstance(required, list):
        required = list(props)
    return props, [k for k in required if isinstance(k, str)]


def _tool_rounds_done(messages: list[dict[str, Any]]) -> int:
    """Tool results since the last user turn."""
    done = 0
    for m in reversed(messages):
        if m.get("role") == "user":
            break
        if m.get("role") == "tool":
            done += 1
    return done


def choose_tool_call(
    *,
    config: SimConfig,
    functions: list[FunctionDefinition],
    tool_choice: ToolChoice,
    messages: list[dict[str, Any]],
    seed: int,
) -> ToolCall | None:
    """The deterministic tool-use policy; None means answer in text."""
    policy = config.tools
    if not functions or tool_choice == "none" or not policy.enabled:
        return None
    named = tool_choice if isinstance(tool_choice, NamedToolChoice) else None
    forced = named is not None or tool_choice == "required"
    if not forced and _tool_rounds_done(messages) >= policy.rounds:
        return None
    if named is not None:
        functions = [f for f in functions if f.name == named.function.name] or functions
    rng = random.Random(seed)  # noqa: S311 - deterministic fake arguments, not secrets
    index = 0 if policy.select == ToolSelect.FIRST else seed % len(functions)
    fn = functions[index]
    props, names = _argument_names(fn.parameters or {})
    args = {k: _fake_value(props.get(k), k, rng) for k in names}
    call_id = f"chatcmpl-tool-{rng.getrandbits(64):016x}"
    return ToolCall(call_id, fn.name, json.dumps(args))

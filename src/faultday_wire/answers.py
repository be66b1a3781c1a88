"""How an answer shows what it rests on: document markers, and the mark of a canned answer.

The agent puts each retrieved document in the model's prompt behind a marker
``[doc:ID]``; a grounded model (the simulator, as one) cites some of those
markers in its answer. The load reads the markers back: a RAG answer that cites
none of the retrieved ids is off topic. The agent marks a fallback answer that
no model wrote (``canned`` in its JSON, and a header), and the load also knows
the default canned text, for agents that mark nothing.
"""

from __future__ import annotations

import re
from typing import Final

# An id as Qdrant spells one (an integer or a UUID) or any short name; no spaces or brackets.
DOC_MARKER: Final = re.compile(r"\[doc:([A-Za-z0-9][A-Za-z0-9_.:-]{0,63})\]")

ANSWER_HEADER: Final = "x-faultday-answer"  # "canned" or "model"
CANNED: Final = "canned"

# The reference agent's canned answer (src/faultday/stack/profiles/agent.yaml says the same;
# tests/quality checks that they agree).
DEFAULT_CANNED_ANSWER: Final = (
    "The assistant is degraded right now and cannot answer fully. Your request was "
    "received; please try again in a few minutes."
)


def doc_marker(doc_id: object) -> str:
    """The marker that puts a document's id in a prompt: ``[doc:ID]``."""
    return f"[doc:{doc_id}]"


def cited(text: str) -> list[str]:
    """The document ids a text cites, in order, each once."""
    return list(dict.fromkeys(DOC_MARKER.findall(text)))

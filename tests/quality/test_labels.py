"""Labels of real answers: the simulator's, the agent's, and Locust's view of cut and slow ones."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import httpx
import pytest
from tests.llmsim.conftest import FAST, _stop, launch

from faultday.core.records import AnswerLabel
from faultday.load.quality import Answer, answer_text, chunk_text, is_canned, label, sources_of
from faultday_wire.answers import ANSWER_HEADER, CANNED, DEFAULT_CANNED_ANSWER, cited

# tests/agent's helpers start redis-server, the simulators and the agent runtime by PID.
sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))
from procs import Procs, dead_url

REPO = Path(__file__).resolve().parents[2]
CONTEXT = "Answer from this context:\n[doc:17] rotate the keys\n[doc:4] page the on-call"
MESSAGES = [
    {"role": "system", "content": CONTEXT},
    # The model's own earlier answer cites doc 99: that is no context it was given now.
    {"role": "assistant", "content": "Earlier I said [doc:99]."},
    {"role": "user", "content": "How do I rotate the keys?"},
]


@pytest.fixture
def sim(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = launch(tmp_path, *FAST, "--output-len-mean", "24")
    try:
        yield s.url
    finally:
        _stop(s.proc)


def _chat(url: str, messages: list[dict[str, str]], **extra: object) -> dict[str, object]:
    body = {"model": "test-model", "messages": messages, "max_tokens": 40, **extra}
    resp = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10)
    resp.raise_for_status()
    return resp.json()  # type: ignore[no-any-return]


def test_the_simulator_cites_the_markers_of_its_context_deterministically(sim: str) -> None:
    first = _chat(sim, MESSAGES)
    text = answer_text(first)
    assert text is not None
    ids = cited(text)
    assert ids and set(ids) <= {"17", "4"}, text  # never 99: not context of this turn
    assert answer_text(_chat(sim, MESSAGES)) == text  # same seed and prompt: same citations
    # The API shape is vLLM's: a citation is one token of text, the usage counts it.
    usage = first["usage"]
    assert isinstance(usage, dict) and usage["completion_tokens"] == 24
    assert label(Answer(200, text, sources=("17", "4"))) == AnswerLabel.OK
    assert label(Answer(200, text, sources=("5", "6"))) == AnswerLabel.OFF_TOPIC
    bare = answer_text(_chat(sim, MESSAGES[2:]))
    assert bare is not None and not cited(bare)
    assert label(Answer(200, bare, sources=())) == AnswerLabel.OFF_TOPIC
    assert label(Answer(200, bare)) == AnswerLabel.OK  # not RAG: nothing to cite


def test_a_streamed_answer_carries_the_same_citations(sim: str) -> None:
    whole = answer_text(_chat(sim, MESSAGES))
    body = {"model": "test-model", "messages": MESSAGES, "max_tokens": 40, "stream": True}
    text, tokens = "", 0
    with httpx.stream("POST", f"{sim}/v1/chat/completions", json=body, timeout=10) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                piece = chunk_text(json.loads(line[6:]))
                text += piece
                tokens += bool(piece)
    assert text == whole and tokens == 24


def test_completions_cite_per_prompt(sim: str) -> None:
    body = {"model": "test-model", "prompt": ["ctx [doc:a1] q", "no context"], "max_tokens": 12}
    out = httpx.post(f"{sim}/v1/completions", json=body, timeout=10).json()
    texts = [c["text"] for c in out["choices"]]
    assert cited(texts[0]) == ["a1"] and cited(texts[1]) == []


@pytest.fixture
def procs(tmp_path: Path):  # type: ignore[no-untyped-def]
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.close()


def test_agent_answers_ok_off_topic_without_retrieval_and_canned_without_models(
    procs: Procs,
) -> None:
    _, redis_url = procs.redis()
    primary, primary_url = procs.llmsim("sim-primary")
    backup, backup_url = procs.llmsim("sim-backup")
    urls = {
        "redis": redis_url,
        "llm-primary": primary_url,
        "llm-backup": backup_url,
        "embedder": dead_url(),  # retrieval is down: RAG answers without context
        "qdrant": dead_url(),
        "tools": dead_url(),
    }
    _, agent = procs.agent(urls=urls)

    def ask(rag: bool) -> tuple[httpx.Response, AnswerLabel]:
        body = {"session_id": "q1", "message": "How do I rotate the keys?", "rag": rag}
        resp = httpx.post(f"{agent}/v1/chat", json=body, timeout=30)
        payload = resp.json()
        answer = Answer(
            resp.status_code,
            answer_text(payload),
            canned=payload.get(CANNED) is True,
            sources=sources_of(payload) if rag else None,
        )
        return resp, label(answer)

    resp, verdict = ask(rag=False)
    assert verdict == AnswerLabel.OK and resp.headers[ANSWER_HEADER] == "model"
    resp, verdict = ask(rag=True)
    assert (
        resp.json()["sources"] == [] and "retrieval_unavailable" in resp.json()["degraded_reasons"]
    )
    assert verdict == AnswerLabel.OFF_TOPIC
    primary.kill(signal.SIGKILL)
    backup.kill(signal.SIGKILL)
    resp, verdict = ask(rag=True)
    assert resp.status_code == 200 and resp.json()[CANNED] is True
    assert resp.headers[ANSWER_HEADER] == CANNED and verdict == AnswerLabel.CANNED
    # The load knows the text too, for an agent that marks nothing.
    assert is_canned(resp.json()["answer"])
    assert label(Answer(200, resp.json()["answer"], sources=())) == AnswerLabel.CANNED


def test_the_profiles_canned_text_is_the_one_the_load_knows() -> None:
    import yaml

    for path in (REPO / "stack" / "agent.yaml", REPO / "src/faultday/stack/profiles/agent.yaml"):
        assert yaml.safe_load(path.read_text())["canned_answer"] == DEFAULT_CANNED_ANSWER, path


# One case per label, in AnswerLabel's order; the test below checks none is missing.
CASES = {
    AnswerLabel.TIMEOUT: [Answer(0, None, error="timed out", timed_out=True), Answer(504, "")],
    AnswerLabel.TRUNCATED: [Answer(200, " the [doc:1]", cut=True)],
    AnswerLabel.ERROR: [Answer(500, "oops"), Answer(200, "x", error='{"error": "dead"}')],
    AnswerLabel.CANNED: [
        Answer(200, "  " + DEFAULT_CANNED_ANSWER.replace(" ", "\n ")),
        Answer(200, "Sorry.", canned=True, sources=()),
    ],
    AnswerLabel.EMPTY: [Answer(200, " \n"), Answer(200, None)],
    AnswerLabel.OFF_TOPIC: [
        Answer(200, "words [doc:3]", sources=("1", "2")),
        Answer(200, "words", sources=()),
    ],
    AnswerLabel.OK: [Answer(200, "words [doc:2]", sources=("1", "2")), Answer(200, "words")],
}


@pytest.mark.parametrize(
    ("expected", "answer"), [(k, a) for k, answers in CASES.items() for a in answers]
)
def test_each_label(expected: AnswerLabel, answer: Answer) -> None:
    assert label(answer) == expected


def test_every_label_has_a_case_and_a_custom_canned_text_counts() -> None:
    assert set(CASES) == set(AnswerLabel)
    assert label(Answer(200, "We are down."), ["We are down."]) == AnswerLabel.CANNED

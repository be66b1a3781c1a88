"""No 500 for a client's mistake: the simulator answers a malformed request with a 400 naming
the field, as vLLM does, and stays up and quick (issue 15, point 6).

One simulator process serves the whole module; Hypothesis draws bodies from the
request models' JSON schemas and breaks them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from tests.llmsim.conftest import FAST, Sim, _stop, launch
from tests.malformed import (
    ANY_JSON,
    FUZZ_SETTINGS,
    Raw,
    encode,
    nudged,
    request_bodies,
    send,
    well_shaped,
)

from faultday_refstack.llmsim.faults import FaultSpec
from faultday_refstack.llmsim.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    TokenizeRequest,
)
from faultday_refstack.llmsim.server import MAX_JSON_DEPTH

TIMEOUT = 10.0  # a request, its stream read to the end included
MAX_MODEL_LEN = 256  # keeps a well-shaped request with ignore_eos under a second
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    tmp = tmp_path_factory.mktemp("llmsim-malformed")
    args = ["--max-model-len", str(MAX_MODEL_LEN), "--output-len-mean", "4"]
    started = launch(tmp, *FAST, *args, name="fuzz")
    try:
        yield started
    finally:
        _stop(started.proc)


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client() as client:
        yield client


def post(sim: Sim, path: str, body: bytes) -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.post(f"{sim.url}{path}", content=body, headers=headers, timeout=TIMEOUT)


def chat(**fields: Any) -> bytes:
    return encode({"model": "test-model", "messages": MESSAGES, **fields})


# --- the cases the issue lists --------------------------------------------------------------------
ISSUE_CASES = [
    (chat(max_tokens="abc"), "body.max_tokens", "int_parsing"),
    (chat(max_tokens=[5]), "body.max_tokens", "int_type"),
    (chat(max_tokens=Raw("1e400")), "body.max_tokens", "finite_number"),
    (chat(max_tokens=Raw("NaN")), "body.max_tokens", "finite_number"),
    (chat(n="abc"), "body.n", "int_parsing"),
    (chat(seed="abc"), "body.seed", "int_parsing"),
    (chat(min_tokens="abc"), "body.min_tokens", "int_parsing"),
    (chat(n=[1]), "body.n", "int_type"),
    (
        chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
        "body.tools.0.function.parameters",
        "dict_type",
    ),
    (chat(seed=2**64), "body.seed", "less_than_equal"),
    (
        chat(messages=[{"role": "user", "content": "a\ud800"}]),  # sent escaped: "a\\ud800"
        "body.messages.0.content",
        "string_unicode",
    ),
]


@pytest.mark.parametrize(("body", "param", "kind"), ISSUE_CASES)
def test_issue_cases_are_400_naming_the_field(sim: Sim, body: bytes, param: str, kind: str) -> None:
    resp = post(sim, "/v1/chat/completions", body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("Bad Request", param, 400)
    assert f"'loc': '{param}'" in error["message"]
    assert f"'type': '{kind}'" in error["message"]


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_deeply_nested_json_is_400_not_recursion(sim: Sim, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    for depth in (MAX_JSON_DEPTH + 1, 900, 100_000):  # past the limit, near and past the stack's
        inner = opener * depth + "1" * (opener != "[") + closer * depth
        body = f'{{"model": "test-model", "messages": {json.dumps(MESSAGES)}, "x": {inner}}}'
        resp = post(sim, "/v1/chat/completions", body.encode())
        assert resp.status_code == 400, (depth, resp.text)
        assert f"nested deeper than {MAX_JSON_DEPTH} levels" in resp.json()["error"]["message"]
    # A tool schema nested as deep as real ones are still serves.
    params: dict[str, Any] = {"type": "string"}
    for _ in range(10):
        params = {"type": "object", "properties": {"a": params}, "required": ["a"]}
    tools = [{"type": "function", "function": {"name": "f", "parameters": params}}]
    assert post(sim, "/v1/chat/completions", chat(tools=tools)).status_code == 200


def test_output_budget_errors_are_vllms(sim: Sim) -> None:
    cases = [
        (chat(max_tokens=0), "max_tokens", "max_tokens must be at least 1, got 0."),
        (chat(min_tokens=-1), "min_tokens", "min_tokens must be greater than or equal to 0"),
        (chat(max_tokens=5, min_tokens=6), "min_tokens", "less than or equal to max_tokens=5"),
        (chat(min_tokens=10**40), "min_tokens", f"max_tokens={MAX_MODEL_LEN - 9}, got 1000"),
    ]
    for body, param, words in cases:
        resp = post(sim, "/v1/chat/completions", body)
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert (error["type"], error["param"]) == ("BadRequestError", param)
        assert words in error["message"]


def test_openai_sdk_raises_bad_request(sim: Sim) -> None:
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", timeout=10, max_retries=0)
    bad: list[dict[str, Any]] = [
        {"max_tokens": "abc"},
        {"n": [1]},
        {"seed": "abc"},
        {"extra_body": {"min_tokens": "abc"}},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
    ]
    for fields in bad:
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="test-model", messages=MESSAGES, **fields)  # type: ignore[arg-type]
        assert err.value.status_code == 400
        field = next(iter(fields.get("extra_body", fields)))
        assert field in str(err.value)


def test_fault_api_refuses_non_finite_and_huge_factors(sim: Sim) -> None:
    for factor in (Raw("NaN"), Raw("Infinity"), Raw("1e400"), 1e6):
        resp = post(sim, "/admin/faults", encode({"kind": "throttle", "factor": factor}))
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == "body.factor"
    assert httpx.get(f"{sim.url}/admin/faults", timeout=5).json()["faults"] == []


# --- the property: any malformed body -------------------------------------------------------------
def _schema(model: type[Any]) -> dict[str, Any]:
    return model.model_json_schema()  # type: ignore[no-any-return]


TOOL_PARAMS = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["object", "string", "integer", "array"]) | ANY_JSON,
        "properties": st.dictionaries(st.text(max_size=6), ANY_JSON, max_size=3) | ANY_JSON,
        "required": st.lists(st.text(max_size=6), max_size=3) | ANY_JSON,
    },
)
GOOD_TOOLS = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.text(min_size=1, max_size=10)}, optional={"parameters": TOOL_PARAMS}
            ),
        }
    ),
    max_size=2,
)
TEXT = well_shaped({"type": "string", "minLength": 1})  # now and then, text Unicode refuses
PINS: dict[str, st.SearchStrategy[Any]] = {
    "model": st.sampled_from(["test-model", None]),
    "n": st.sampled_from([1, None]),
    "max_tokens": st.integers(1, 64) | st.none(),
    "min_tokens": st.integers(0, 8),
    "seed": st.integers(0, 2**32) | st.none(),
    "stream": st.booleans(),
}
CHAT_PINS = {
    **PINS,
    "messages": st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "tool"]), "content": TEXT}
        ),
        min_size=1,
        max_size=3,
    ),
    "tools": GOOD_TOOLS,
    "tool_choice": st.sampled_from(["auto", "required", "none"])
    | st.builds(lambda n: {"type": "function", "function": {"name": n}}, st.text(max_size=6)),
}
ENDPOINTS = {
    "/v1/chat/completions": nudged(well_shaped(_schema(ChatCompletionRequest)), CHAT_PINS),
    "/v1/completions": nudged(well_shaped(_schema(CompletionRequest)), {**PINS, "prompt": TEXT}),
    "/tokenize": well_shaped(_schema(TokenizeRequest)),
}


def _check(sim: Sim, path: str, status: int, seconds: float, head: bytes) -> None:
    event(f"HTTP {status}")  # `pytest --hypothesis-show-statistics` shows how many of each
    assert status < 500, f"{path}: {status} {head!r}"
    assert seconds < TIMEOUT, f"{path}: {seconds:.1f}s"
    assert sim.proc.poll() is None, f"the simulator died on {path}: {sim.log_text()[-2000:]}"


@pytest.mark.parametrize("path", sorted(ENDPOINTS))
@FUZZ_SETTINGS
@given(data=st.data())
def test_malformed_requests_never_5xx(
    sim: Sim, http: httpx.Client, path: str, data: st.DataObject
) -> None:
    body = data.draw(request_bodies(ENDPOINTS[path]), label="body")
    a = send(http, "POST", f"{sim.url}{path}", body, timeout=TIMEOUT)
    _check(sim, path, a.status, a.seconds, a.head)


def _refused_fault(body: bytes) -> bool:
    try:  # as the server reads it: the standard library's parser, then the model
        FaultSpec.model_validate(json.loads(body))
    except (ValueError, TypeError, RecursionError):
        return True
    return False


@FUZZ_SETTINGS
@given(body=request_bodies(well_shaped(_schema(FaultSpec))).filter(_refused_fault))
def test_malformed_fault_bodies_never_5xx(sim: Sim, http: httpx.Client, body: bytes) -> None:
    """Only bodies the fault API refuses: a valid fault would hang or kill the engine on purpose."""
    a = send(http, "POST", f"{sim.url}/admin/faults", body, timeout=TIMEOUT)
    _check(sim, "/admin/faults", a.status, a.seconds, a.head)
    assert a.status == 400, a.head


def test_still_serving_and_no_traceback(sim: Sim) -> None:
    """Runs last in the module: nothing the fuzzing sent raised inside the server or broke it."""
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200
    assert httpx.get(f"{sim.url}/admin/faults", timeout=5).json()["faults"] == []
    ok = post(sim, "/v1/chat/completions", chat(max_tokens=3))
    assert ok.status_code == 200, ok.text
    assert "Traceback" not in sim.log_text()

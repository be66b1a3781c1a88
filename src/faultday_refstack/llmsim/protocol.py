"""Request bodies of the OpenAI-compatible API, typed as vLLM's ``protocol`` module types them.

Only the fields the simulator reads are declared. Types follow vLLM's pydantic
models in lax mode, so what vLLM coerces (``"5"`` → 5) is coerced here and what
it refuses (``"abc"``, ``[5]``, NaN or 1e400 for an integer, a string for a
tool's ``parameters``) is a 400 that names the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# vLLM bounds ``seed`` to a C long: the sampler hands it to torch.
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class _Body(BaseModel):
    # vLLM's OpenAIBaseModel accepts fields it does not know (it logs them): OpenAI
    # clients send many the simulator has no use for, so they are ignored, not refused.
    model_config = ConfigDict(extra="ignore", frozen=True)


class StreamOptions(_Body):
    include_usage: bool | None = None


class FunctionDefinition(_Body):
    name: str
    description: str | None = None
    # A JSON schema; vLLM checks only that it is an object, and so does the simulator.
    parameters: dict[str, Any] | None = None


class Tool(_Body):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    function: NamedFunction
    type: Literal["function"] = "function"


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice | None


class _Sampling(_Body):
    model: str | None = None
    n: int | None = 1
    max_tokens: int | None = None
    min_tokens: int = 0
    seed: int | None = Field(default=None, ge=LONG_MIN, le=LONG_MAX)
    ignore_eos: bool = False
    stream: bool | None = False
    stream_options: StreamOptions | None = None


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    # Messages stay plain objects: the chat template renders whatever content they carry.
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice = "auto"


class CompletionRequest(_Sampling):
    """``POST /v1/completions``."""

    prompt: list[int] | list[list[int]] | str | list[str] | None = None


class TokenizeRequest(_Body):
    """``POST /tokenize``: a prompt, or messages rendered through the chat template."""

    model: str | None = None
    prompt: str = ""
    messages: list[dict[str, Any]] | None = None
    tools: list[Tool] | None = None

"""The HTTP door's answers in OpenAI's shapes (pure types): what `chat_stream` encodes and
what `python -m infra.http_api_spec` writes into the OpenAPI document, so the two cannot
disagree. Field names and meanings are OpenAI's; `turnstream` holds what OpenAI's shapes
have no field for (`chat_stream` says what)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class PromptTokensDetails(msgspec.Struct, frozen=True):
    cached_tokens: int  # prompt tokens the engine's prefix cache already held


class CompletionUsage(msgspec.Struct, frozen=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


FinishName = Literal["stop", "length", "content_filter", "tool_calls"]


class FunctionCall(msgspec.Struct, frozen=True):
    name: str
    arguments: str  # JSON, an instance of the tool's parameters


class ToolCallObject(msgspec.Struct, frozen=True):
    """A call the answer made (OpenAI's `tool_calls` item; streamed whole, in one chunk)."""

    id: str
    type: Literal["function"]
    function: FunctionCall


class ChunkToolCall(msgspec.Struct, frozen=True):
    index: int
    id: str
    type: Literal["function"]
    function: FunctionCall


class ChunkDelta(msgspec.Struct, frozen=True, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ChunkToolCall] | None = None


class ChunkChoice(msgspec.Struct, frozen=True):
    index: int
    delta: ChunkDelta
    finish_reason: FinishName | None


class ChatCompletionChunk(msgspec.Struct, frozen=True, omit_defaults=True):
    """One Server-Sent Event of a streamed answer (`data:`); its `id:` line is its position
    in the turn's log, `epoch-offset`."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None  # the last chunk, with stream_options.include_usage
    turnstream: dict[str, Any] | None = None


class AssistantMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    role: Literal["assistant"]
    content: str | None  # None when the answer is only tool calls
    refusal: str | None  # the canned reply, when the output safety check cut the answer
    tool_calls: list[ToolCallObject] | None = None


class Choice(msgspec.Struct, frozen=True):
    index: int
    message: AssistantMessage
    finish_reason: FinishName
    logprobs: None


class ChatCompletion(msgspec.Struct, frozen=True):
    """A whole answer (`stream: false`)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage
    turnstream: dict[str, Any]  # turn_id, conversation_id, and the error code of a cut answer


class ErrorDetail(msgspec.Struct, frozen=True):
    message: str
    type: str
    param: str | None
    code: str  # the WebSocket protocol's error code


class ErrorResponse(msgspec.Struct, frozen=True):
    error: ErrorDetail


class Model(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    turnstream: dict[str, Any] | None = None


class ModelList(msgspec.Struct, frozen=True):
    object: Literal["list"]
    data: list[Model]


class CancelResult(msgspec.Struct, frozen=True):
    id: str
    object: Literal["chat.completion.cancel"]
    cancelled: bool

"""An OpenAI chat-completions request read as the WebSocket protocol's `turn.create` (pure).

The HTTP door speaks OpenAI's request shape and nothing is lost on the way: every field
either has a meaning here or is refused by name (`unsupported_parameter`, HTTP 400), never
ignored. A field sent with its neutral value (`n: 1`, a zero penalty, `logprobs: false`,
`null`) changes nothing and is accepted as if left out, so clients that send their defaults
explicitly still work.

`model`: the router picks the pool and model of every turn, so any name is accepted (an
application written for another provider changes only its base URL and key); the answer's
`model` says what served it, and `GET /v1/models` lists what the router can pick.

Messages: `system`/`developer` messages become the turn's `instructions`; the last message
must be the user's, and is the turn (its text, `image_url` parts by https or `data:` URL,
`input_audio` parts), or the turn is the `tool` messages at the end (the results of the
previous answer's calls); the messages before it are the history the client carries, its
calls and results written as the model reads them (schemas.tools). With a
conversation id (the `X-Turnstream-Conversation-Id` header or `metadata.conversation_id`) the
server keeps the history instead, and the request then holds only the new user message (and
system messages).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec

from schemas.events import ToolCall, ToolResult
from schemas.tools import call_text, result_text
from ws_edge.errors import InvalidMessage, UnsupportedParameter
from ws_edge.messages import (
    AudioPart,
    CreateTurn,
    FunctionTool,
    HistoryMessage,
    ImagePart,
    NamedToolChoice,
    Part,
    ResponseFormatOption,
    ResumeResponse,
    TextPart,
    ToolResultInput,
)

CONVERSATION_HEADER = "X-Turnstream-Conversation-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# what an OpenAI field means when sent with this value: nothing (accepted as left out)
NEUTRAL: dict[str, Any] = {
    "n": 1,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logprobs": False,
    "tools": [],
    "store": False,
    "response_format": {"type": "text"},
    "parallel_tool_calls": True,  # in `auto` an answer may call several tools
}
SUPPORTED = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "n",
        "metadata",
        "response_format",
        "tools",
        "tool_choice",
    }
)


class TextContent(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    text: str


class ImageUrl(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    url: str
    detail: Literal["auto", "low", "high"] = "auto"


class ImageUrlContent(msgspec.Struct, frozen=True, tag_field="type", tag="image_url"):
    image_url: ImageUrl


class InputAudio(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    data: str
    format: Literal["wav", "mp3"]


class InputAudioContent(msgspec.Struct, frozen=True, tag_field="type", tag="input_audio"):
    input_audio: InputAudio


ContentPart = TextContent | ImageUrlContent | InputAudioContent


class CalledFunction(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    arguments: str


class MessageToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    type: Literal["function"]
    function: CalledFunction


class ChatMessage(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None  # an assistant's
    tool_call_id: str | None = None  # a tool message's: the call it answers


class StreamOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    include_usage: bool = False


Tokens = Annotated[int, msgspec.Meta(ge=1, le=4096)]
Stop = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class ChatRequest(msgspec.Struct, frozen=True):
    """OpenAI's chat-completions request, as far as the HTTP door implements it (any other
    field is refused by name; see the module's docstring)."""

    model: str  # any name: the router picks what serves the turn (GET /v1/models)
    messages: list[ChatMessage]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Tokens | None = None
    max_completion_tokens: Tokens | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    stop: Stop | Annotated[list[Stop], msgspec.Meta(max_length=4)] | None = None
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    n: int = 1
    metadata: dict[str, str] | None = None  # conversation_id: the server keeps the history
    response_format: ResponseFormatOption | None = None  # checked by the session, as on WS
    tools: list[FunctionTool] | None = None  # checked by the session, as on WS
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """What the door sends the session, and how it answers."""

    create: CreateTurn
    model: str  # as the client named it (echoed nowhere: the answer says what served it)
    stream: bool
    include_usage: bool


def parse_chat_request(
    body: bytes, *, conversation_id: str | None, idempotency_key: str | None
) -> ChatTurn:
    """The request as a turn, or `InvalidMessage` / `UnsupportedParameter` saying why not."""
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise InvalidMessage(f"the body is not JSON: {exc}", code="malformed_json") from None
    if not isinstance(raw, dict):
        raise InvalidMessage("the body must be a JSON object")
    fields = {k: v for k, v in raw.items() if v is not None and NEUTRAL.get(k, ...) != v}
    if isinstance(fields.get("messages"), list):  # a message's null fields (refusal: null)
        fields["messages"] = [_without_nulls(m) for m in fields["messages"]]
    for name in fields:
        if name not in SUPPORTED:
            raise UnsupportedParameter(name, f"parameter {name!r} is not supported")
    try:
        request = msgspec.convert(fields, ChatRequest)
    except msgspec.ValidationError as exc:
        raise InvalidMessage(f"invalid request: {exc}") from None
    if request.n != 1:
        raise UnsupportedParameter("n", "only n=1 is supported (one answer per request)")
    if request.stream_options is not None and not request.stream:
        raise InvalidMessage("stream_options needs stream: true")
    conversation = conversation_id or (request.metadata or {}).get("conversation_id")
    instructions, history, last, results = _split(
        request.messages, server_history=bool(conversation)
    )
    text, parts = _content(last) if last is not None else ("", [])
    if conversation is None:
        conversation, client_turn_id = _stateless_ids(idempotency_key)
    else:
        client_turn_id = _turn_key(idempotency_key)
    stop = [request.stop] if isinstance(request.stop, str) else (request.stop or [])
    create = {
        "type": "turn.create",
        "conversation_id": conversation,
        "text": text,
        "parts": parts,
        "client_turn_id": client_turn_id,
        "max_tokens": request.max_completion_tokens or request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "seed": request.seed,
        "stop": stop,
        "history": history,
        "instructions": instructions,
        "response_format": request.response_format,
        "tools": request.tools or [],
        "tool_choice": request.tool_choice,
        "tool_results": results,
    }
    given = {k: v for k, v in create.items() if v is not None}
    try:
        turn = msgspec.convert({**given, "speech": None}, CreateTurn)  # text answers only
    except msgspec.ValidationError as exc:
        raise InvalidMessage(f"invalid request: {exc}") from None
    include_usage = request.stream_options is not None and request.stream_options.include_usage
    return ChatTurn(turn, request.model, request.stream, include_usage)


def resume_message(turn_id: str, last_event_id: str | None) -> ResumeResponse:
    """`response.resume` after the SSE event the client has (`epoch-offset`; none: from the
    start)."""
    if not last_event_id:
        return ResumeResponse(turn_id=turn_id)
    epoch, sep, offset = last_event_id.partition("-")
    try:
        if not sep:
            raise ValueError(last_event_id)
        return msgspec.convert(
            {"turn_id": turn_id, "epoch": int(epoch), "offset": int(offset)}, ResumeResponse
        )
    except (ValueError, msgspec.ValidationError):
        raise InvalidMessage(
            f"Last-Event-ID {last_event_id!r} is not an event id of this stream (epoch-offset)"
        ) from None


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v is not None}
    return value


def _split(
    messages: list[ChatMessage], *, server_history: bool
) -> tuple[str, list[HistoryMessage] | None, ChatMessage | None, list[ToolResultInput]]:
    """(instructions, the carried history, the turn's own user message, the tool results
    it returns). The turn is the last user message, or the tool messages at the end (the
    results of the last answer's calls; the turn then has no text). Calls and results
    earlier in a carried history read as the model wrote and read them (schemas.tools)."""
    if not messages:
        raise InvalidMessage("messages is empty: the last message must be the user's")
    end = len(messages)
    while end > 0 and messages[end - 1].role == "tool":
        end -= 1
    results = [_result(m, i) for i, m in enumerate(messages[end:], start=end)]
    last: ChatMessage | None = None
    if not results:
        last = messages[-1]
        if last.role != "user":
            raise InvalidMessage(
                f"the last message is the {last.role}'s; it must be the user's (or tool results)"
            )
        end -= 1
    instructions: list[str] = []
    history: list[HistoryMessage] = []
    names: dict[str, str] = {}  # call id -> tool name, for the results that answer them
    for i, message in enumerate(messages[:end]):
        if message.role in ("system", "developer"):
            instructions.append(_text_only(message, i))
        elif server_history and not (results and message.role == "assistant"):
            raise InvalidMessage(
                f"messages[{i}] is a {message.role} message: with a conversation id the server "
                "keeps the history, so send only the new user message or the tool results "
                "(and system messages)"
            )
        elif server_history:
            continue  # the answer whose calls these results answer: the server has it
        elif message.role == "tool":
            result = _result(message, i)
            named = ToolResult(result.call_id, result.output, names.get(result.call_id, ""))
            history.append(HistoryMessage("user", result_text([named])))
        elif message.role == "assistant":
            calls = [
                ToolCall(c.id, c.function.name, c.function.arguments)
                for c in message.tool_calls or []
            ]
            names.update((c.call_id, c.name) for c in calls)
            history.append(HistoryMessage("assistant", _text_only(message, i) + call_text(calls)))
        else:
            history.append(HistoryMessage("user", _text_only(message, i)))
    return "\n\n".join(instructions), None if server_history else history, last, results


def _result(message: ChatMessage, index: int) -> ToolResultInput:
    if message.role != "tool" or not message.tool_call_id:
        raise InvalidMessage(f"messages[{index}]: a tool message needs its tool_call_id")
    try:
        return msgspec.convert(
            {"call_id": message.tool_call_id, "output": _text_only(message, index)},
            ToolResultInput,
        )
    except msgspec.ValidationError as exc:
        raise InvalidMessage(f"messages[{index}]: {exc}") from None


def _text_only(message: ChatMessage, index: int) -> str:
    if isinstance(message.content, str):
        return message.content
    texts = []
    for j, part in enumerate(message.content or []):
        if not isinstance(part, TextContent):
            raise InvalidMessage(
                f"messages[{index}].content[{j}]: images and audio are read only in the last "
                "user message"
            )
        texts.append(part.text)
    return "\n".join(texts)


def _content(message: ChatMessage) -> tuple[str, list[Part]]:
    """The user message as the turn's text and media parts."""
    if isinstance(message.content, str):
        return message.content, []
    parts: list[Part] = []
    for part in message.content or []:
        if isinstance(part, TextContent):
            if part.text:
                parts.append(TextPart(part.text))
        elif isinstance(part, ImageUrlContent):
            parts.append(_image(part.image_url.url))
        else:
            parts.append(AudioPart(data=part.input_audio.data, format="auto"))
    return "", parts


def _image(url: str) -> ImagePart:
    """An https URL is fetched by preprocessing (with its guards); a `data:` URL is inline."""
    if url.startswith("data:"):
        header, sep, data = url.partition(",")
        if not sep or not header.endswith(";base64"):
            raise InvalidMessage("an image data: URL must be base64 (data:image/png;base64,...)")
        return ImagePart(data=data)
    return ImagePart(url=url)


def _stateless_ids(idempotency_key: str | None) -> tuple[str, str | None]:
    """A stateless request is a conversation of its own. With an `Idempotency-Key`, a retry
    names the same conversation and turn (answered once); without one, each request is new."""
    if idempotency_key is None:
        return f"http-{uuid.uuid4().hex}", None
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]
    return f"http-{digest}", "idempotency"


def _turn_key(idempotency_key: str | None) -> str | None:
    """A turn id the key maps to in a server-side conversation (any key: it is hashed)."""
    if idempotency_key is None:
        return None
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]

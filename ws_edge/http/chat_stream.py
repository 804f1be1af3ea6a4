"""The session's events as OpenAI chat-completion objects and Server-Sent Events (pure).

Streamed: `turn.accepted` opens with the role chunk (and, under `turnstream`, the turn's id
and the URL that resumes it); each `response.delta` is a content chunk whose SSE `id:` is its
position in the turn's log (`epoch-offset`), which a reconnecting client sends back as
`Last-Event-ID`; `response.done` is the chunk with `finish_reason`, then the usage chunk
when asked for (`stream_options.include_usage`), then `data: [DONE]`. A turn that fails is
an `error` object in the stream, as OpenAI sends one (the SDKs raise it).

What OpenAI's shape has no field for travels under `turnstream` in a chunk, which clients
that do not know it skip: an answer restarted by a worker failover (`restarted`: drop the
text so far), an answer the output safety check cut (`retracted`, with the canned reply
that replaces it), a resume whose history had expired (`resumed: "expired"`, the whole
answer in the last chunk's `text`), and the transcript of the turn's audio.

Tool calls: each `response.tool_call.done` is one chunk with the whole call in
`delta.tool_calls` (its pieces are not streamed: OpenAI's clients join what they get), and
the answer ends with `finish_reason: "tool_calls"`.

Not streamed: the same events gathered into one `chat.completion`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from schemas.events import OUTPUT_CUT, FinishReason, Usage
from ws_edge.http.shapes import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    ChunkDelta,
    ChunkToolCall,
    CompletionUsage,
    ErrorDetail,
    ErrorResponse,
    FinishName,
    FunctionCall,
    PromptTokensDetails,
    ToolCallObject,
)
from ws_edge.messages import (
    ErrorEvent,
    InputTranscript,
    ResponseDelta,
    ResponseDone,
    ResponseRestarted,
    ResponseResumed,
    ResponseRetracted,
    ResponseStarted,
    ResponseToolCallDone,
    ServerEvent,
    TurnAccepted,
)

DONE_FRAME = "data: [DONE]\n\n"
HEARTBEAT_FRAME = ": keep-alive\n\n"
RETRY_FRAME = "retry: 500\n\n"  # EventSource: reconnect after 0.5 s (its default is ~3 s)
_FINISH: dict[FinishReason, FinishName] = {
    FinishReason.STOP: "stop",
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.LENGTH: "length",
    FinishReason.CANCELLED: "stop",
    FinishReason.SAFETY: "content_filter",
}
_encoder = msgspec.json.Encoder()


def completion_id(turn_id: str) -> str:
    return f"chatcmpl-{turn_id}"


def turn_of(completion: str) -> str | None:
    prefix, sep, turn_id = completion.partition("-")
    return turn_id if sep and prefix == "chatcmpl" and turn_id else None


def event_id(epoch: int | None, offset: int | None) -> str | None:
    """The SSE id of a frame at this position of the turn's log (`Last-Event-ID` resumes
    after it)."""
    if epoch is None or offset is None:
        return None
    return f"{epoch}-{offset}"


def usage_object(usage: Usage) -> CompletionUsage:
    return CompletionUsage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
        prompt_tokens_details=PromptTokensDetails(usage.cached_prompt_tokens),
    )


def error_object(code: str, message: str, *, kind: str, param: str | None = None) -> ErrorResponse:
    """OpenAI's error shape; `code` is the WebSocket protocol's error code."""
    return ErrorResponse(ErrorDetail(message=message, type=kind, param=param, code=code))


@dataclass
class ChatStream:
    """One answer's chunks, as its events arrive (streamed or gathered)."""

    turn_id: str
    model: str  # what the client asked for, until `response.started` says what serves it
    created_s: int
    resume_url: str
    include_usage: bool = False
    done: ResponseDone | None = None
    error: ErrorEvent | None = None  # the turn failed (or was never accepted)
    text: list[str] = field(default_factory=list)
    conversation_id: str = ""

    @property
    def id(self) -> str:
        return completion_id(self.turn_id)

    def frames(self, event: ServerEvent) -> list[str]:
        """The SSE frames of one event (none for events OpenAI's stream has no place for)."""
        match event:
            case TurnAccepted():
                self.conversation_id = event.conversation_id
                opening = {
                    "turn_id": event.turn_id,
                    "conversation_id": event.conversation_id,
                    "resume_url": self.resume_url,
                }
                chunk = self._chunk(ChunkDelta("assistant", ""), turnstream=opening)
                return [_frame(chunk)]
            case ResponseStarted():
                self.model = event.model or self.model
                return []
            case ResponseDelta():
                self.record(event)
                return [self.delta_frame(event)]
            case ResponseRestarted():
                self.text.clear()
                chunk = self._chunk(ChunkDelta(), turnstream={"restarted": event.reason})
                return [_frame(chunk)]
            case ResponseRetracted():
                self.text = [event.text]
                chunk = self._chunk(
                    ChunkDelta(), turnstream={"retracted": event.reason, "text": event.text}
                )
                return [_frame(chunk)]
            case InputTranscript():
                chunk = self._chunk(ChunkDelta(), turnstream={"transcript": event.text})
                return [_frame(chunk, event_id(event.epoch, event.offset))]
            case ResponseResumed() if event.status != "resumed":
                if event.status == "restarted":
                    self.text.clear()
                chunk = self._chunk(ChunkDelta(), turnstream={"resumed": event.status})
                return [_frame(chunk, event_id(event.epoch, event.offset))]
            case ResponseToolCallDone():  # whole, in one chunk (the pieces add nothing)
                call = ChunkToolCall(
                    event.index,
                    event.call_id,
                    "function",
                    FunctionCall(event.name, event.arguments),
                )
                chunk = self._chunk(ChunkDelta(tool_calls=[call]))
                return [_frame(chunk, event_id(event.epoch, event.offset))]
            case ResponseDone():
                return self._finish(event)
            case ErrorEvent():
                self.error = event
                return [_frame(error_object(event.code, event.message, kind="server_error"))]
        return []

    def record(self, delta: ResponseDelta) -> None:
        """Keep a delta's text for the whole answer (a stream's frame is `delta_frame`'s)."""
        self.text.append(delta.text)

    def delta_frame(self, delta: ResponseDelta) -> str:
        """A content chunk at the delta's position; pure, so the outbox may render deltas it
        joined for a reader that fell behind (one chunk, the last one's id)."""
        chunk = self._chunk(ChunkDelta(content=delta.text))
        return _frame(chunk, event_id(delta.epoch, delta.offset))

    def _finish(self, done: ResponseDone) -> list[str]:
        self.done = done
        self.model = done.model or self.model
        position = event_id(done.epoch, done.offset)
        failed = done.finish_reason == FinishReason.ERROR and done.error is not None
        if failed:
            assert done.error is not None
            body = error_object(done.error.code, done.error.message, kind="server_error")
            return [_frame(body, position), DONE_FRAME]
        extra: dict[str, Any] = {}
        if done.error is not None:  # cut, blocked or cancelled: the code says which
            extra["error"] = {"code": done.error.code, "message": done.error.message}
        if done.finish_reason == FinishReason.CANCELLED:
            extra["cancelled"] = True
        if not self.text and done.text:  # nothing streamed (a resume past an expired log)
            extra["text"] = done.text
        chunk = self._chunk(
            ChunkDelta(), finish_reason=_FINISH[done.finish_reason], turnstream=extra
        )
        frames = [_frame(chunk, position)]
        if self.include_usage:
            usage = ChatCompletionChunk(
                id=self.id,
                object="chat.completion.chunk",
                created=self.created_s,
                model=self.model,
                choices=[],
                usage=usage_object(done.usage),
            )
            frames.append(_frame(usage))
        return [*frames, DONE_FRAME]

    def completion(self) -> ChatCompletion:
        """The whole answer as one `chat.completion` (after `response.done`)."""
        assert self.done is not None
        done = self.done
        cut = done.error is not None and done.error.code == OUTPUT_CUT
        calls = [
            ToolCallObject(c.call_id, "function", FunctionCall(c.name, c.arguments))
            for c in done.tool_calls
        ]
        content = done.text or (None if calls else "")
        message = AssistantMessage("assistant", content, done.text if cut else None, calls or None)
        finish = _FINISH.get(done.finish_reason, "stop")
        about: dict[str, Any] = {"turn_id": self.turn_id, "conversation_id": self.conversation_id}
        if done.error is not None:
            about["error"] = {"code": done.error.code}
        return ChatCompletion(
            id=self.id,
            object="chat.completion",
            created=self.created_s,
            model=self.model,
            choices=[Choice(0, message, finish, None)],
            usage=usage_object(done.usage),
            turnstream=about,
        )

    def _chunk(
        self,
        delta: ChunkDelta,
        *,
        finish_reason: str | None = None,
        turnstream: dict[str, Any] | None = None,
    ) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id,
            object="chat.completion.chunk",
            created=self.created_s,
            model=self.model,
            choices=[ChunkChoice(0, delta, finish_reason)],  # type: ignore[arg-type]
            turnstream=turnstream or None,
        )


def _frame(data: msgspec.Struct, id_: str | None = None) -> str:
    body = _encoder.encode(data).decode()
    return f"id: {id_}\ndata: {body}\n\n" if id_ is not None else f"data: {body}\n\n"

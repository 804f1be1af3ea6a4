"""The session's events as OpenAI chunks: positions as SSE ids, the finish and usage chunks,
errors in the stream, and what OpenAI has no field for under `turnstream`."""

from __future__ import annotations

import json

import msgspec

from schemas.events import ErrorInfo, FinishReason, Timings, ToolCall, Usage
from ws_edge.http.chat_stream import DONE_FRAME, ChatStream, event_id, turn_of
from ws_edge.messages import (
    ErrorEvent,
    ResponseDelta,
    ResponseDone,
    ResponseRestarted,
    ResponseRetracted,
    ResponseStarted,
    ResponseToolCallDelta,
    ResponseToolCallDone,
    TurnAccepted,
)
from ws_edge.outbox import Outbox

USAGE = Usage(prompt_tokens=11, completion_tokens=3, cached_prompt_tokens=4)
TIMINGS = Timings(queue_ms=1.0, ttft_ms=2.0, e2e_ms=3.0)


def done(reason=FinishReason.STOP, text="Hi there", error=None) -> ResponseDone:
    return ResponseDone("t1", reason, text, USAGE, TIMINGS, "smollm2", error, 0, 9)


def parsed(frame: str) -> tuple[str | None, dict | str]:
    """(the SSE id, the data) of one frame."""
    lines = dict(line.split(": ", 1) for line in frame.strip().split("\n"))
    data = lines["data"]
    return lines.get("id"), data if data == "[DONE]" else json.loads(data)


def stream(include_usage=False) -> ChatStream:
    return ChatStream("t1", "gpt-4o-mini", 1700000000, "/v1/x/events", include_usage)


def test_an_answer_streams_as_openai_chunks_with_positions_as_event_ids():
    chat = stream(include_usage=True)
    frames = chat.frames(TurnAccepted("t1", "c1"))
    frames += chat.frames(ResponseStarted("t1", "smollm2", 0, 0))
    frames += chat.frames(ResponseDelta("t1", 0, "Hi", 0, 1))
    frames += chat.frames(ResponseDelta("t1", 1, " there", 0, 2))
    frames += chat.frames(done())
    events = [parsed(f) for f in frames]
    ids = [i for i, _ in events]
    assert ids == [None, "0-1", "0-2", "0-9", None, None]
    opening = events[0][1]
    assert opening["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert opening["turnstream"]["resume_url"] == "/v1/x/events"
    assert opening["id"] == "chatcmpl-t1" and opening["object"] == "chat.completion.chunk"
    assert [e["choices"][0]["delta"].get("content") for _, e in events[1:3]] == ["Hi", " there"]
    assert events[1][1]["model"] == "smollm2"  # what serves it, once the answer started
    assert events[3][1]["choices"][0]["finish_reason"] == "stop"
    assert events[4][1]["choices"] == []
    assert events[4][1]["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 3,
        "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    assert frames[-1] == DONE_FRAME


def test_usage_is_streamed_only_when_asked_for():
    chat = stream()
    frames = chat.frames(done())
    assert len(frames) == 2 and frames[-1] == DONE_FRAME


def test_a_failed_turn_is_an_error_object_in_the_stream():
    chat = stream()
    error = ErrorInfo("engine_error", "the engine failed", retryable=True)
    frames = chat.frames(done(FinishReason.ERROR, "", error))
    _, body = parsed(frames[0])
    assert body["error"]["code"] == "engine_error"
    assert frames[-1] == DONE_FRAME
    assert parsed(chat.frames(ErrorEvent("store_unavailable", "x"))[0])[1]["error"]["code"] == (
        "store_unavailable"
    )


def test_a_cut_answer_is_retracted_and_ends_as_content_filter():
    chat = stream()
    chat.frames(ResponseDelta("t1", 0, "bad words", 0, 1))
    retract = chat.frames(ResponseRetracted("t1", "output_cut", "I can't help with that.", 9))
    assert parsed(retract[0])[1]["turnstream"] == {
        "retracted": "output_cut",
        "text": "I can't help with that.",
    }
    cut = ErrorInfo("output_cut", "cut")
    final = parsed(chat.frames(done(FinishReason.SAFETY, "I can't help with that.", cut))[0])[1]
    assert final["choices"][0]["finish_reason"] == "content_filter"
    assert final["turnstream"]["error"]["code"] == "output_cut"
    assert (
        msgspec.to_builtins(chat.completion())["choices"][0]["message"]["refusal"]
        == "I can't help with that."
    )


def test_a_restart_says_to_drop_the_text_so_far():
    chat = stream()
    chat.frames(ResponseDelta("t1", 0, "Hel", 0, 1))
    frame = chat.frames(ResponseRestarted("t1", "worker_failover", 1))
    assert parsed(frame[0])[1]["turnstream"] == {"restarted": "worker_failover"}
    assert chat.text == []


def test_the_whole_answer_gathers_into_one_completion():
    chat = stream()
    chat.frames(TurnAccepted("t1", "c1"))
    chat.frames(ResponseDelta("t1", 0, "Hi there", 0, 1))
    chat.frames(done(FinishReason.LENGTH))
    completion = msgspec.to_builtins(chat.completion())
    assert completion["object"] == "chat.completion"
    assert completion["model"] == "smollm2"
    assert completion["choices"][0]["message"]["content"] == "Hi there"
    assert completion["choices"][0]["finish_reason"] == "length"
    assert completion["usage"]["total_tokens"] == 14
    assert completion["turnstream"]["conversation_id"] == "c1"


def test_completion_ids_name_their_turn():
    assert turn_of("chatcmpl-abc") == "abc"
    assert turn_of("chatcmpl-") is None and turn_of("other-abc") is None
    assert event_id(None, 3) is None and event_id(1, -1) == "1--1"


async def test_chunks_that_wait_for_a_reader_behind_are_joined_at_the_last_position():
    """A reader behind gets one chunk for the deltas queued meanwhile, with the last one's id
    (a resume from it misses nothing); the whole answer still has every piece once."""
    chat, box = stream(), Outbox(limit=100)
    for seq, text in enumerate(["Hel", "lo", " there"]):
        delta = ResponseDelta("t1", seq, text, 0, seq + 1)
        chat.record(delta)
        box.put_delta(delta, render=chat.delta_frame)
    [frame] = await box.take_all()
    event, chunk = parsed(frame)
    assert event == "0-3" and chunk["choices"][0]["delta"]["content"] == "Hello there"
    assert box.coalesced == 2
    box.put_delta(ResponseDelta("t1", 3, "!", 0, 4), render=chat.delta_frame)
    assert [parsed(f)[0] for f in await box.take_all()] == ["0-4"]  # taken: not joined
    chat.record(ResponseDelta("t1", 3, "!", 0, 4))
    assert "".join(chat.text) == "Hello there!"


def test_tool_calls_stream_whole_in_one_chunk_and_end_the_answer_as_tool_calls():
    chat = stream()
    call = ToolCall("call_t1_0", "get_weather", '{"city":"Oslo"}')
    assert chat.frames(ResponseToolCallDelta("t1", 0, "call_t1_0", '{"name"', 0, 3)) == []
    frames = chat.frames(
        ResponseToolCallDone("t1", 0, "call_t1_0", call.name, call.arguments, 0, 4)
    )
    event_id_, chunk = parsed(frames[0])
    assert event_id_ == "0-4"
    assert chunk["choices"][0]["delta"]["tool_calls"] == [
        {
            "index": 0,
            "id": "call_t1_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
        }
    ]
    ended = ResponseDone("t1", FinishReason.TOOL_CALLS, "", USAGE, TIMINGS, "m", None, 0, 9, [call])
    final = parsed(chat.frames(ended)[0])[1]
    assert final["choices"][0]["finish_reason"] == "tool_calls"
    message = msgspec.to_builtins(chat.completion())["choices"][0]["message"]
    assert message["content"] is None and message["tool_calls"][0]["id"] == "call_t1_0"

"""A turn's tools as the edge takes them: checked, turned into the contract, and the
answer's calls shown to the client as `response.tool_call.*`."""

from __future__ import annotations

import msgspec
import pytest

from harness.factories import completed
from schemas.events import TokenChunk, ToolCall, ToolChoiceMode, TurnStarted
from schemas.tools import call_id
from schemas.turn_log import LogPosition
from ws_edge.actions import Send
from ws_edge.errors import InvalidMessage
from ws_edge.messages import (
    CreateTurn,
    ResponseDelta,
    ResponseDone,
    ResponseToolCallDelta,
    ResponseToolCallDone,
)
from ws_edge.tools import turn_tools

from .test_session import authed, frame, only_error

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def create(**fields) -> CreateTurn:
    return msgspec.convert({"conversation_id": "c1", "text": "hi", **fields}, CreateTurn)


def refused(**fields) -> str:
    with pytest.raises(InvalidMessage) as caught:
        turn_tools(create(**fields), max_schema_bytes=16 * 1024)
    assert caught.value.code == "invalid_tools"
    return str(caught.value)


def test_tools_choice_and_results_become_the_contracts():
    named = {"type": "function", "function": {"name": "get_weather"}}
    tools, choice, results = turn_tools(
        create(
            tools=[WEATHER, {"type": "function", "function": {"name": "ping"}}],
            tool_choice=named,
            tool_results=[{"call_id": "call_1", "output": '{"ok": true}'}],
        ),
        max_schema_bytes=16 * 1024,
    )
    assert [t.name for t in tools] == ["get_weather", "ping"]
    assert msgspec.json.decode(tools[0].parameters)["properties"]["city"] == {"type": "string"}
    assert tools[1].parameters == '{"type":"object"}'
    assert (choice.mode, choice.name) == (ToolChoiceMode.NAMED, "get_weather")
    assert [(r.call_id, r.output) for r in results] == [("call_1", '{"ok": true}')]
    assert turn_tools(create(tools=[WEATHER]), max_schema_bytes=16 * 1024)[1] is None
    text = create(tools=[WEATHER], response_format={"type": "text"})
    assert turn_tools(text, max_schema_bytes=16 * 1024)[0] == tools[:1]


def test_bad_tools_are_refused_saying_what():
    assert "twice" in refused(tools=[WEATHER, WEATHER])
    bad = {"type": "function", "function": {"name": "x", "parameters": {"type": "strin"}}}
    assert "tools[0].function.parameters" in refused(tools=[bad])
    remote = {"type": "function", "function": {"name": "x", "parameters": {"$ref": "http://a"}}}
    assert "refers outside" in refused(tools=[remote])
    assert "needs tools" in refused(tool_choice="required")
    other = {"type": "function", "function": {"name": "rm"}}
    assert "not in tools" in refused(tools=[WEATHER], tool_choice=other)
    assert "response_format" in refused(tools=[WEATHER], response_format={"type": "json_object"})
    twice = [{"call_id": "a", "output": "1"}, {"call_id": "a", "output": "2"}]
    assert "twice" in refused(tool_results=twice)


def test_a_turn_carries_its_tools_and_a_results_turn_needs_no_text():
    session = authed()
    [submit] = session.receive(
        frame(type="turn.create", conversation_id="c1", text="weather?", tools=[WEATHER])
    )
    assert [t.name for t in submit.turn.tools] == ["get_weather"]
    results = [{"call_id": "call_x_0", "output": "sunny"}]
    [back] = session.receive(frame(type="turn.create", conversation_id="c2", tool_results=results))
    assert back.turn.text == "" and back.turn.tool_results[0].output == "sunny"
    error = only_error(session.receive(frame(type="turn.create", conversation_id="c3")))
    assert "tool results" in error.message


def test_the_answers_calls_reach_the_client_as_tool_call_events():
    session = authed()
    [submit] = session.receive(
        frame(type="turn.create", conversation_id="c1", text="weather?", tools=[WEATHER])
    )
    turn = submit.turn
    session.submit_succeeded(turn.turn_id)
    session.relay(TurnStarted(turn_id=turn.turn_id, worker_id="w", model="m", attempt="a1"))
    [text] = session.relay(
        TokenChunk(turn_id=turn.turn_id, seq=0, text="Let me see.", emitted_at_ms=1, attempt="a1")
    )
    assert isinstance(text.event, ResponseDelta)
    [piece] = session.relay(
        TokenChunk(
            turn_id=turn.turn_id,
            seq=1,
            text='{"name":"get_weather"',
            emitted_at_ms=2,
            attempt="a1",
            call_index=0,
        )
    )
    assert isinstance(piece.event, ResponseToolCallDelta)
    assert (piece.event.index, piece.event.call_id) == (0, call_id(turn.turn_id, 0))
    call = ToolCall(call_id(turn.turn_id, 0), "get_weather", '{"city":"Oslo"}')
    done = completed(
        turn.turn_id,
        conversation_id="c1",
        text="Let me see.",
        finish_reason="tool_calls",
        tool_calls=[call],
    )
    sent = [a.event for a in session.relay(done, LogPosition(1, 5)) if isinstance(a, Send)]
    assert isinstance(sent[0], ResponseToolCallDone) and sent[0].arguments == '{"city":"Oslo"}'
    assert sent[0].offset is None  # only response.done carries the record's position
    assert (sent[1].epoch, sent[1].offset) == (1, 5)
    assert isinstance(sent[1], ResponseDone) and sent[1].tool_calls == [call]
    assert sent[1].finish_reason == "tool_calls"


def test_session_tools_are_offered_by_every_turn_without_its_own():
    session = authed()
    [updated] = session.receive(
        frame(type="session.update", tools=[WEATHER], tool_choice="required")
    )
    assert [t.function.name for t in updated.event.tools] == ["get_weather"]
    assert updated.event.tool_choice == "required"
    [plain] = session.receive(frame(type="turn.create", conversation_id="c1", text="weather?"))
    assert [t.name for t in plain.turn.tools] == ["get_weather"]
    assert plain.turn.tool_choice.mode == ToolChoiceMode.REQUIRED
    ping = {"type": "function", "function": {"name": "ping"}}
    [own] = session.receive(
        frame(type="turn.create", conversation_id="c2", text="ping", tools=[ping])
    )
    assert [t.name for t in own.turn.tools] == ["ping"] and own.turn.tool_choice is None
    bad = {"type": "function", "function": {"name": "x", "parameters": {"type": 7}}}
    error = only_error(session.receive(frame(type="session.update", tools=[bad])))
    assert error.code == "invalid_tools"
    [cleared] = session.receive(frame(type="session.update", tools=None, tool_choice=None))
    assert cleared.event.tools == []
    [after] = session.receive(frame(type="turn.create", conversation_id="c3", text="hi"))
    assert after.turn.tools == []

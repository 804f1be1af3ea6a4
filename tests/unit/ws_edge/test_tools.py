"""A turn's tools as the edge takes them: checked, turned into the contract, and the
answer's calls shown to the client as `response.tool_call.*`."""

from __future__ import annotations

import msgspec
import pytest

from harness.factories import completed
from schemas.events import TokenChunk, ToolCall, ToolChoiceMode, ToolSpec, TurnStarted
from schemas.tools import AllowList, call_id, continuation
from schemas.turn_log import LogPosition
from ws_edge.actions import FollowTurn, Send
from ws_edge.auth import mint_token
from ws_edge.errors import InvalidMessage, ToolsUnavailable
from ws_edge.messages import (
    CreateTurn,
    ResponseDelta,
    ResponseDone,
    ResponseToolCallDelta,
    ResponseToolCallDone,
)
from ws_edge.server_tools import ServerTools
from ws_edge.tools import turn_tools

from .test_session import SECRET, authed, frame, make_session, only_error

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


# ---- the deployment's tools (MCP servers'; `{"type": "mcp"}`) --------------------------------
CATALOG = ServerTools(
    AllowList.parse("acme=kv__*,calc__add;globex=calc__add"),
    [
        ToolSpec("calc__add", "Add", '{"type":"object"}', server="calc", read_only=True),
        ToolSpec("calc__divide", "Divide", '{"type":"object"}', server="calc", read_only=True),
        ToolSpec("kv__put", "Store", '{"type":"object"}', server="kv"),
        ToolSpec("kv__get", "Read", '{"type":"object"}', server="kv", read_only=True),
    ],
)


def served(tenant: str, **fields):
    return turn_tools(
        create(**fields), max_schema_bytes=16 * 1024, tenant=tenant, server_tools=CATALOG
    )


def test_an_mcp_entry_offers_the_servers_tools_the_tenant_may_call():
    tools, _, _ = served("acme", tools=[{"type": "mcp", "server_label": "calc"}])
    assert [t.name for t in tools] == ["calc__add"]  # divide: not allowed to acme
    assert all(t.server == "calc" and t.read_only for t in tools)
    tools, _, _ = served(
        "acme", tools=[{"type": "mcp", "server_label": "kv", "allowed_tools": ["put"]}]
    )
    assert [(t.name, t.read_only) for t in tools] == [("kv__put", False)]
    named = {"type": "function", "function": {"name": "kv__get"}}
    _, choice, _ = served("acme", tools=[{"type": "mcp", "server_label": "kv"}], tool_choice=named)
    assert (choice.mode, choice.name) == (ToolChoiceMode.NAMED, "kv__get")


def test_server_tools_outside_the_allow_list_or_mixed_with_functions_are_refused():
    def refusal(tenant: str, **fields) -> str:
        with pytest.raises(InvalidMessage) as caught:
            served(tenant, **fields)
        assert caught.value.code == "invalid_tools"
        return str(caught.value)

    assert "'kv'" in refusal("globex", tools=[{"type": "mcp", "server_label": "kv"}])
    assert "'nope'" in refusal("acme", tools=[{"type": "mcp", "server_label": "nope"}])
    only = {"type": "mcp", "server_label": "calc", "allowed_tools": ["divide"]}
    assert "divide" in refusal("acme", tools=[only])
    assert "not both" in refusal("acme", tools=[WEATHER, {"type": "mcp", "server_label": "kv"}])
    twice = [{"type": "mcp", "server_label": "kv"}] * 2
    assert "twice" in refusal("acme", tools=twice)
    # an edge with no catalog (no allow-list, or no tools worker) offers none
    with pytest.raises(InvalidMessage):
        turn_tools(
            create(tools=[{"type": "mcp", "server_label": "kv"}]), max_schema_bytes=16 * 1024
        )


def test_an_answer_continued_by_the_tools_streams_its_continuation_next():
    session = make_session()
    session._server_tools = CATALOG
    session.open(mint_token(SECRET, "alice", "acme"))
    named = {"type": "function", "function": {"name": "kv__put"}}
    [submit] = session.receive(
        frame(
            type="turn.create",
            conversation_id="c1",
            text="remember",
            tools=[{"type": "mcp", "server_label": "kv"}],
            tool_choice=named,
        )
    )
    turn = submit.turn
    session.submit_succeeded(turn.turn_id)
    nxt = continuation(turn)
    call = ToolCall(call_id(turn.turn_id, 0), "kv__put", "{}")
    done = completed(
        turn.turn_id,
        conversation_id="c1",
        finish_reason="tool_calls",
        tool_calls=[call],
        continuation=nxt,
    )
    actions = session.relay(done, LogPosition(1, 3))
    [ended] = [
        a.event for a in actions if isinstance(a, Send) and isinstance(a.event, ResponseDone)
    ]
    assert ended.continued_by == nxt.turn_id
    [follow] = [a for a in actions if isinstance(a, FollowTurn)]
    assert follow.turn == nxt and follow.owner == session.principal.owner
    assert nxt.turn_id in session.open_turns
    # its frames wait for its log, then come in order, without a `response.resumed`
    live = TokenChunk(turn_id=nxt.turn_id, seq=1, text=" more", emitted_at_ms=2, attempt="a1")
    assert session.relay(live, LogPosition(1, 2)) == []
    started = TurnStarted(turn_id=nxt.turn_id, worker_id="w", model="m", attempt="a1")
    first = TokenChunk(turn_id=nxt.turn_id, seq=0, text="Stored", emitted_at_ms=1, attempt="a1")
    sent = session.follow_loaded(
        nxt.turn_id, [(started, LogPosition(1, 0)), (first, LogPosition(1, 1))]
    )
    texts = [a.event.text for a in sent if isinstance(a.event, ResponseDelta)]
    assert texts == ["Stored", " more"]
    assert not any(type(a.event).__name__ == "ResponseResumed" for a in sent)
    # the same answer again (a resumed log): nothing new to follow
    assert not [a for a in session.relay(done) if isinstance(a, FollowTurn)]


def test_an_edge_whose_tools_worker_listed_nothing_says_to_retry():
    """Tools are offered (an allow-list) but no catalog is in Redis: the tools worker is
    down or starting. A retryable error, not 'not offered to you'."""
    waiting = ServerTools(AllowList.parse("acme=kv__*"), [])
    with pytest.raises(ToolsUnavailable) as caught:
        turn_tools(
            create(tools=[{"type": "mcp", "server_label": "kv"}]),
            max_schema_bytes=16 * 1024,
            tenant="acme",
            server_tools=waiting,
        )
    assert caught.value.code == "tools_unavailable" and caught.value.retryable

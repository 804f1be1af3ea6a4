"""Function calling's text format: tools described, calls constrained and read back."""

from __future__ import annotations

import json

import jsonschema
import msgspec
import pytest

from harness.factories import submitted
from schemas.events import (
    MediaKind,
    MediaRef,
    OutputFormat,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    ToolSpec,
    Truncation,
)
from schemas.tools import (
    all_server_calls,
    call_constraint,
    call_id,
    call_text,
    choice_in_force,
    continuation,
    continuation_id,
    idempotency_key,
    split_calls,
    tools_preamble,
)

WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city now",
    json.dumps(
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    ),
)
ADD = ToolSpec("add", "", json.dumps({"type": "object", "properties": {"a": {"type": "number"}}}))


def test_a_tagged_call_is_read_out_of_the_text_with_a_stable_id():
    text = (
        'Let me look.<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    )
    rest, calls = split_calls(text, "turn-123", whole=False)
    assert rest == "Let me look."
    assert calls == [ToolCall(call_id("turn-123", 0), "get_weather", '{"city":"Oslo"}')]
    assert split_calls(text, "turn-123", whole=False) == (rest, calls)  # a regenerate: same id
    assert call_id("turn-123", 0) != call_id("turn-124", 0)


def test_two_calls_get_their_own_indices_and_a_broken_one_stays_text():
    one = '<tool_call>{"name":"add","arguments":{"a":1}}</tool_call>'
    two = '<tool_call>{"name":"add","arguments":{"a":2}}</tool_call>'
    rest, calls = split_calls(one + " and " + two, "t", whole=False)
    assert [json.loads(c.arguments)["a"] for c in calls] == [1, 2] and rest == "and"
    assert [c.call_id for c in calls] == [call_id("t", 0), call_id("t", 1)]
    broken = '<tool_call>{"name": "add", "argum'  # cut by max_tokens
    assert split_calls(broken, "t", whole=False) == (broken, [])


def test_a_whole_answer_call_is_untagged_json():
    rest, calls = split_calls('{"name":"add","arguments":{"a":3}}', "t", whole=True)
    assert rest == "" and calls[0].name == "add"
    assert split_calls('{"name":"add","argu', "t", whole=True) == ('{"name":"add","argu', [])


def test_required_and_named_hold_the_whole_answer_to_a_call_of_the_offered_tools():
    required = call_constraint([WEATHER, ADD], ToolChoice(ToolChoiceMode.REQUIRED))
    assert required.type == OutputFormat.JSON_SCHEMA
    schema = json.loads(required.schema)
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "Oslo"}}, schema)
    jsonschema.validate({"name": "add", "arguments": {"a": 1}}, schema)
    for wrong in ({"name": "rm", "arguments": {}}, {"name": "get_weather", "arguments": {}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)
    named = json.loads(
        call_constraint([WEATHER, ADD], ToolChoice(ToolChoiceMode.NAMED, "add")).schema
    )
    jsonschema.validate({"name": "add", "arguments": {}}, named)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "get_weather", "arguments": {"city": "x"}}, named)


def test_auto_is_free_text_with_tagged_calls_and_none_offers_nothing():
    auto = call_constraint([WEATHER, ADD], ToolChoice())
    tag = json.loads(auto.schema)
    assert auto.type == OutputFormat.STRUCTURAL_TAG and tag["triggers"] == ["<tool_call>"]
    assert [s["begin"] for s in tag["structures"]] == [
        '<tool_call>{"name":"get_weather","arguments":',
        '<tool_call>{"name":"add","arguments":',
    ]
    assert call_constraint([WEATHER], ToolChoice(ToolChoiceMode.NONE)) is None
    assert choice_in_force([], ToolChoice()) is None
    assert choice_in_force([WEATHER], None) == ToolChoice()


def test_the_prompt_describes_the_tools_and_history_reads_calls_back_the_same_way():
    preamble = tools_preamble([WEATHER])
    assert "get_weather" in preamble and '"city"' in preamble and "<tool_call>" in preamble
    call = ToolCall("c", "get_weather", '{"city":"Oslo"}')
    _, again = split_calls(call_text([call]), "x", whole=False)
    assert (again[0].name, again[0].arguments) == (call.name, call.arguments)


# ---- the deployment's tools: which answers the tools worker continues, and how ---------------
def test_only_an_answer_whose_calls_are_all_the_deployments_is_continued_by_the_server():
    put = ToolSpec("kv__put", server="kv")
    weather = ToolSpec("get_weather")
    call = ToolCall("call_t_0", "kv__put", "{}")
    assert all_server_calls([put], [call])
    assert not all_server_calls([put, weather], [call, ToolCall("call_t_1", "get_weather", "{}")])
    assert not all_server_calls([put], [])
    assert not all_server_calls([weather], [ToolCall("call_t_0", "kv__put", "{}")])  # not offered


def test_the_continuation_is_derived_and_never_forces_another_call():
    turn = submitted(
        "t-1",
        text="remember this",
        tools=[ToolSpec("kv__put", server="kv")],
        tool_choice=ToolChoice(ToolChoiceMode.NAMED, "kv__put"),
        media=[MediaRef(kind=MediaKind.IMAGE, sha256="ab" * 32)],
        truncates=[Truncation("t-0", "heard")],
    )
    nxt = continuation(turn)
    assert nxt.turn_id == continuation(turn).turn_id == continuation_id("t-1") != "t-1"
    assert continuation(nxt).turn_id not in (nxt.turn_id, turn.turn_id)  # the next round's own
    assert (nxt.text, nxt.media, nxt.truncates, nxt.tool_results) == ("", [], [], [])
    assert nxt.tool_choice == ToolChoice(ToolChoiceMode.AUTO) and nxt.tool_round == 1
    assert (nxt.conversation_id, nxt.edge_id, nxt.tools) == (
        turn.conversation_id,
        turn.edge_id,
        turn.tools,
    )
    auto = continuation(msgspec.structs.replace(turn, tool_choice=None))
    assert auto.tool_choice is None and continuation(auto).tool_round == 2


def test_a_calls_idempotency_key_is_its_derived_id():
    call = ToolCall(call_id("t-1", 2), "kv__put", "{}")
    assert (
        idempotency_key(call)
        == call_id("t-1", 2)
        == idempotency_key(ToolCall(call.call_id, "kv__put", '{"a":1}'))
    )

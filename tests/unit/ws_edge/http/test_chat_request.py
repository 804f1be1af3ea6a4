"""An OpenAI chat-completions request read as `turn.create`: every field has a meaning or is
refused by name; messages split into instructions, carried history and the turn."""

from __future__ import annotations

import json

import pytest

from schemas.events import ToolCall, ToolResult
from schemas.tools import call_text, result_text
from ws_edge.errors import InvalidMessage, UnsupportedParameter
from ws_edge.http.chat_request import parse_chat_request, resume_message
from ws_edge.messages import AudioPart, ImagePart, JsonSchemaFormat, TextPart


def parse(conversation_id: str | None = None, idempotency_key: str | None = None, **body):
    body.setdefault("model", "gpt-4o-mini")
    body.setdefault("messages", [{"role": "user", "content": "hello"}])
    raw = json.dumps(body).encode()
    return parse_chat_request(raw, conversation_id=conversation_id, idempotency_key=idempotency_key)


def test_a_plain_request_is_a_stateless_turn_with_an_empty_carried_history():
    chat = parse()
    assert chat.create.text == "hello"
    assert chat.create.history == []  # carried (empty), not the server's
    assert chat.create.conversation_id.startswith("http-")
    assert chat.create.speech is None
    assert not chat.stream


def test_sampling_fields_map_onto_the_turn():
    chat = parse(
        max_completion_tokens=40,
        max_tokens=99,
        temperature=0.5,
        top_p=0.9,
        seed=7,
        stop="END",
        stream=True,
        stream_options={"include_usage": True},
    )
    turn = chat.create
    assert (turn.max_tokens, turn.temperature, turn.top_p, turn.seed) == (40, 0.5, 0.9, 7)
    assert turn.stop == ["END"]
    assert chat.stream and chat.include_usage
    assert parse(max_tokens=12).create.max_tokens == 12


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("logit_bias", {"1": 2}),
        ("functions", [{"name": "f"}]),
        ("presence_penalty", 0.5),
        ("user", "u1"),
        ("parallel_tool_calls", False),
    ],
)
def test_unsupported_fields_are_refused_by_name(field, value):
    with pytest.raises(UnsupportedParameter) as caught:
        parse(**{field: value})
    assert caught.value.param == field
    assert caught.value.code == "unsupported_parameter"


def test_neutral_values_and_nulls_are_accepted_as_left_out():
    chat = parse(n=1, presence_penalty=0, frequency_penalty=0, logprobs=False, tools=[], user=None)
    assert chat.create.text == "hello"


def test_a_response_format_rides_on_the_turn_and_text_is_the_default():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}
    turn = parse(response_format=fmt).create
    assert isinstance(turn.response_format, JsonSchemaFormat)
    assert turn.response_format.json_schema.schema == schema
    assert parse(response_format={"type": "text"}).create.response_format is None
    with pytest.raises(InvalidMessage):
        parse(response_format={"type": "xml"})


def test_more_than_one_choice_is_refused():
    with pytest.raises(UnsupportedParameter) as caught:
        parse(n=2)
    assert caught.value.param == "n"


def test_messages_split_into_instructions_history_and_the_turn():
    chat = parse(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris.", "refusal": None},
            {"role": "developer", "content": [{"type": "text", "text": "No lists."}]},
            {"role": "user", "content": "And of Italy?"},
        ]
    )
    turn = chat.create
    assert turn.instructions == "Be brief.\n\nNo lists."
    assert [(m.role, m.content) for m in turn.history or []] == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
    ]
    assert turn.text == "And of Italy?"


def test_the_last_message_must_be_the_users():
    with pytest.raises(InvalidMessage, match="must be the user's"):
        parse(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}])
    with pytest.raises(InvalidMessage, match="empty"):
        parse(messages=[])


def test_tools_ride_on_the_turn_and_trailing_tool_messages_are_its_results():
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
    }
    chat = parse(
        tools=[weather],
        tool_choice="auto",
        messages=[
            {"role": "user", "content": "weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
    )
    turn = chat.create
    assert [t.function.name for t in turn.tools] == ["get_weather"] and turn.tool_choice == "auto"
    assert turn.text == "" and [(r.call_id, r.output) for r in turn.tool_results] == [
        ("call_1", "sunny")
    ]
    assert [m.role for m in turn.history] == ["user", "assistant"]
    assert turn.history[1].content == call_text(
        [ToolCall("call_1", "get_weather", '{"city":"Oslo"}')]
    )


def test_results_in_a_carried_history_read_as_the_model_read_them():
    call = {"id": "c9", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    turn = parse(
        messages=[
            {"role": "user", "content": "add"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c9", "content": "3"},
            {"role": "assistant", "content": "It is 3."},
            {"role": "user", "content": "thanks"},
        ]
    ).create
    assert turn.history[2].content == result_text([ToolResult("c9", "3", "add")])
    assert turn.text == "thanks" and not turn.tool_results
    with pytest.raises(InvalidMessage, match="tool_call_id"):
        parse(messages=[{"role": "tool", "content": "x"}])


def test_media_parts_of_the_last_message_become_the_turns_parts():
    chat = parse(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                    {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
                ],
            }
        ]
    )
    assert chat.create.parts == [
        TextPart("what is this?"),
        ImagePart(url="https://example.com/a.png"),
        ImagePart(data="iVBO"),
        AudioPart(data="UklG", format="auto"),
    ]


def test_media_in_the_history_is_refused_not_dropped():
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    with pytest.raises(InvalidMessage, match=r"messages\[0\]\.content\[0\]"):
        parse(messages=[{"role": "user", "content": [image]}, {"role": "user", "content": "b"}])


def test_a_data_url_must_be_base64():
    image = {"type": "image_url", "image_url": {"url": "data:image/png,rawbytes"}}
    with pytest.raises(InvalidMessage, match="base64"):
        parse(messages=[{"role": "user", "content": [image]}])


def test_a_conversation_id_uses_the_servers_history_and_refuses_a_carried_one():
    chat = parse(conversation_id="c-1", messages=[{"role": "user", "content": "hi"}])
    assert chat.create.conversation_id == "c-1"
    assert chat.create.history is None
    by_metadata = parse(metadata={"conversation_id": "c-2"})
    assert by_metadata.create.conversation_id == "c-2"
    with pytest.raises(InvalidMessage, match="server keeps the history"):
        parse(
            conversation_id="c-1",
            messages=[
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"},
            ],
        )


def test_an_idempotency_key_makes_a_retry_the_same_turn():
    first = parse(idempotency_key="k-1").create
    again = parse(idempotency_key="k-1").create
    other = parse(idempotency_key="k-2").create
    assert (first.conversation_id, first.client_turn_id) == (
        again.conversation_id,
        again.client_turn_id,
    )
    assert first.conversation_id != other.conversation_id
    assert parse().create.conversation_id != parse().create.conversation_id


def test_a_body_that_is_not_a_json_object_is_refused():
    with pytest.raises(InvalidMessage) as caught:
        parse_chat_request(b"{nope", conversation_id=None, idempotency_key=None)
    assert caught.value.code == "malformed_json"
    with pytest.raises(InvalidMessage, match="object"):
        parse_chat_request(b"[1]", conversation_id=None, idempotency_key=None)


def test_out_of_range_values_are_refused_with_the_field():
    with pytest.raises(InvalidMessage, match="temperature"):
        parse(temperature=3.5)
    with pytest.raises(InvalidMessage, match="stop"):
        parse(stop=["a", "b", "c", "d", "e"])


def test_last_event_id_names_the_position_to_resume_after():
    resume = resume_message("t1", "2-17")
    assert (resume.turn_id, resume.epoch, resume.offset) == ("t1", 2, 17)
    start = resume_message("t1", None)
    assert (start.epoch, start.offset) == (0, -1)
    for bad in ("17", "a-b", "1--5"):
        with pytest.raises(InvalidMessage, match="Last-Event-ID"):
            resume_message("t1", bad)

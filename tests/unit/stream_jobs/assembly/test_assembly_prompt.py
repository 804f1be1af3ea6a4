"""Prompt assembly: order of the parts, sliding window over whole turns, placeholders."""

from __future__ import annotations

from schemas.events import Message as ChatMessage
from schemas.events import Role
from stream_jobs.assembly.prompt import (
    MESSAGE_OVERHEAD_TOKENS,
    Passage,
    assemble,
    carried_history,
    with_image_placeholders,
    with_instructions,
)
from stream_jobs.assembly.state import StoredMessage


def words(text: str) -> int:
    return len(text.split())


def turn(question: str, answer: str) -> list[StoredMessage]:
    return [
        StoredMessage(Role.USER, question, words(question)),
        StoredMessage(Role.ASSISTANT, answer, words(answer)),
    ]


HISTORY = turn("q one", "a one") + turn("q two", "a two") + turn("q three", "a three")


def build(budget: int, **overrides):
    args = {
        "persona": "",
        "profile": "",
        "passages": [],
        "history": HISTORY,
        "query": "now",
        "budget_tokens": budget,
        "count_tokens": words,
    }
    return assemble(**{**args, **overrides})


def test_everything_fits_in_order():
    messages, context = build(
        1000,
        persona="Be brief.",
        profile="Likes cats.",
        passages=[Passage("doc#0", "Cats sleep a lot.", 0.8)],
    )
    assert messages[0].role == Role.SYSTEM
    system = messages[0].content
    assert system.index("Be brief.") < system.index("Likes cats.") < system.index("[1] Cats")
    assert [m.content for m in messages[1:]] == [m.content for m in HISTORY] + ["now"]
    assert context.history_messages == 6 and context.dropped_messages == 0
    assert context.retrieved == ["doc#0"] and context.profile
    assert context.prompt_tokens == sum(words(m.content) for m in messages) + 8 * (
        MESSAGE_OVERHEAD_TOKENS
    )


def test_the_oldest_whole_turns_go_first():
    per_turn = 2 * (2 + MESSAGE_OVERHEAD_TOKENS)  # "q two" + "a two" with overheads
    query = words("now") + MESSAGE_OVERHEAD_TOKENS
    messages, context = build(query + 2 * per_turn)
    assert [m.content for m in messages] == ["q two", "a two", "q three", "a three", "now"]
    assert context.dropped_messages == 2 and context.history_messages == 4
    messages, context = build(query + 2 * per_turn - 1)  # one token short of two turns
    assert [m.content for m in messages] == ["q three", "a three", "now"]


def test_no_room_keeps_only_the_query():
    messages, context = build(1)
    assert [m.content for m in messages] == ["now"]
    assert context.dropped_messages == 6


def test_image_placeholders_precede_the_text():
    assert with_image_placeholders("what is this?", 2) == "<image_1>\n<image_2>\nwhat is this?"
    assert with_image_placeholders("plain", 0) == "plain"


def test_a_carried_history_is_counted_and_windowed_like_the_stored_one():
    carried = carried_history(
        [ChatMessage(Role.USER, "one two"), ChatMessage(Role.ASSISTANT, "three")],
        lambda text: len(text.split()),
    )
    assert [(m.role, m.content, m.tokens) for m in carried] == [
        (Role.USER, "one two", 2),
        (Role.ASSISTANT, "three", 1),
    ]
    assert with_instructions("Be kind.", "Be brief.") == "Be kind.\n\nBe brief."
    assert with_instructions("", "Be brief.") == "Be brief."
    assert with_instructions("Be kind.", "") == "Be kind."


def test_a_spoken_language_other_than_english_is_named_in_the_system_message():
    messages, _ = build(1000, persona="Be brief.", language="es")
    assert messages[0].role == Role.SYSTEM
    assert messages[0].content == "Be brief.\n\nThe user is speaking Spanish. Answer in Spanish."
    for quiet in ("en", "", "xx"):  # English, unknown, or a code we cannot name: nothing said
        messages, _ = build(1000, persona="Be brief.", language=quiet)
        assert messages[0].content == "Be brief."

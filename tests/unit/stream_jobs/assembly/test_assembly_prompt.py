"""Prompt assembly: order of the parts, the history window over whole turns (dropped in
blocks so consecutive prompts share their prefix), placeholders."""

from __future__ import annotations

import itertools

from schemas.events import Message as ChatMessage
from schemas.events import Role
from stream_jobs.assembly.prompt import (
    MESSAGE_OVERHEAD_TOKENS,
    Passage,
    assemble,
    carried_history,
    history_block_tokens,
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


def shared_prefix(a: list[ChatMessage], b: list[ChatMessage]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def conversation_prompts(turns: int, block_tokens: int) -> list[list[ChatMessage]]:
    """The prompt of each turn of a conversation whose history outgrows the budget."""
    history: list[StoredMessage] = []
    prompts = []
    for i in range(turns):
        query = f"question {i} about something"
        messages, _ = build(120, history=history, query=query, history_block_tokens=block_tokens)
        prompts.append(messages)
        history += turn(query, f"answer {i} with a few more words in it")
    return prompts


def test_history_is_dropped_in_blocks_so_consecutive_prompts_share_their_history():
    blocked = conversation_prompts(30, block_tokens=60)  # ~3 turns
    sliding = conversation_prompts(30, block_tokens=0)
    # each prompt fits the budget either way
    assert all(sum(words(m.content) + MESSAGE_OVERHEAD_TOKENS for m in p) <= 120 for p in blocked)
    # the next prompt starts with all of this one's history, except where a block went
    kept_whole = [shared_prefix(a, b) >= len(a) - 1 for a, b in itertools.pairwise(blocked)]
    slid_whole = [shared_prefix(a, b) >= len(a) - 1 for a, b in itertools.pairwise(sliding)]
    # before the budget is full (5 turns) both keep everything; after it a 3-turn block
    # moves the start every third turn, the sliding window every turn
    assert sum(kept_whole) == 5 + 15 and sum(slid_whole) == 5, (kept_whole, slid_whole)
    # the window still holds at least the budget less a block
    last = blocked[-1]
    assert sum(words(m.content) + MESSAGE_OVERHEAD_TOKENS for m in last) > 120 - 60 - 21


def test_a_block_is_a_share_of_the_budget():
    assert history_block_tokens(1024, 0.25) == 256 and history_block_tokens(1024, 0) == 0


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

"""Barge-in truncations in the assembly table: the history keeps only what was heard."""

from __future__ import annotations

from harness.factories import completed, enriched
from schemas.events import ErrorInfo, FinishReason, Role, Truncation
from stream_jobs.assembly.state import (
    PENDING_TRUNCATIONS,
    ConversationState,
    HistoryLimits,
    StoredMessage,
    on_completed,
    on_enriched,
    on_truncated,
)

ANSWER = "Hello there. How are you doing today?"


def words(text: str) -> int:
    return len(text.split())


def enrich(state, turn_id, text="q", max_held=8):
    return on_enriched(state, enriched(turn_id, text), now_ms=0.0, max_held=max_held)


def complete(state, turn_id, text=ANSWER, user_text="q", **fields):
    return on_completed(
        state,
        completed(turn_id, text=text, **fields),
        user_text=user_text,
        count_tokens=words,
        limits=HistoryLimits(),
        now_ms=0.0,
    )


def truncate(state, turn_id, text, audio_end_ms=1000.0):
    on_truncated(state, Truncation(turn_id, text, audio_end_ms), count_tokens=words)


def answered(turn_id="t1", text=ANSWER) -> ConversationState:
    state = ConversationState()
    enrich(state, turn_id)
    complete(state, turn_id, text=text)
    return state


def test_truncation_after_the_answer_was_recorded_replaces_it_with_the_heard_text():
    state = answered()
    assert state.messages[-1] == StoredMessage(Role.ASSISTANT, ANSWER, 7, "t1")
    truncate(state, "t1", "Hello there. How ")
    assert state.messages == [
        StoredMessage(Role.USER, "q", 1, "t1"),
        StoredMessage(Role.ASSISTANT, "Hello there. How", 3, "t1"),
    ]


def test_truncation_uses_count_tokens_for_the_new_text():
    state = answered()
    on_truncated(state, Truncation("t1", "Hello there."), count_tokens=len)
    assert state.messages[-1] == StoredMessage(Role.ASSISTANT, "Hello there.", 12, "t1")


def test_truncation_with_nothing_heard_removes_the_answer():
    state = answered()
    truncate(state, "t1", "", audio_end_ms=0.0)
    assert state.messages == [StoredMessage(Role.USER, "q", 1, "t1")]
    truncate(state, "t1", "")  # again: nothing left to change
    assert state.messages == [StoredMessage(Role.USER, "q", 1, "t1")]


def test_whitespace_only_heard_text_removes_the_answer():
    state = answered()
    truncate(state, "t1", "   ")
    assert state.messages == [StoredMessage(Role.USER, "q", 1, "t1")]


def test_truncation_of_the_turn_in_flight_is_applied_at_its_completion():
    state = ConversationState()
    enrich(state, "t1")
    truncate(state, "t1", "Hello there. ", audio_end_ms=640.0)
    assert state.messages == []
    assert state.truncations == [Truncation("t1", "Hello there. ", 640.0)]
    complete(state, "t1")
    assert state.messages == [
        StoredMessage(Role.USER, "q", 1, "t1"),
        StoredMessage(Role.ASSISTANT, "Hello there.", 2, "t1"),
    ]
    assert state.truncations == []


def test_truncation_of_a_waiting_turn_is_kept_until_its_completion():
    state = ConversationState()
    enrich(state, "t1")
    enrich(state, "t2")
    truncate(state, "t2", "Hello")
    assert state.truncations == [Truncation("t2", "Hello", 1000.0)]
    complete(state, "t1")  # not t2's: the full answer is kept
    assert state.messages[-1] == StoredMessage(Role.ASSISTANT, ANSWER, 7, "t1")
    assert state.truncations == [Truncation("t2", "Hello", 1000.0)]
    complete(state, "t2")
    assert state.messages[-1] == StoredMessage(Role.ASSISTANT, "Hello", 1, "t2")
    assert state.truncations == []


def test_in_flight_truncation_with_nothing_heard_records_no_answer():
    state = ConversationState()
    enrich(state, "t1")
    truncate(state, "t1", "")
    complete(state, "t1")
    assert state.messages == [StoredMessage(Role.USER, "q", 1, "t1")]


def test_applying_twice_is_idempotent():
    state = answered()
    truncate(state, "t1", "Hello there. ")
    once = list(state.messages)
    truncate(state, "t1", "Hello there. ")
    assert state.messages == once
    assert state.messages[-1] == StoredMessage(Role.ASSISTANT, "Hello there.", 2, "t1")


def test_applying_twice_while_in_flight_keeps_one_pending_then_is_idempotent():
    state = ConversationState()
    enrich(state, "t1")
    truncate(state, "t1", "Hello ")
    truncate(state, "t1", "Hello there. ")  # the later one replaces the earlier
    assert state.truncations == [Truncation("t1", "Hello there. ", 1000.0)]
    complete(state, "t1")
    after = list(state.messages)
    truncate(state, "t1", "Hello there. ")  # the edge sends it again with the next turn
    assert state.messages == after
    assert state.messages[-1].content == "Hello there."
    assert state.truncations == []


def test_heard_text_that_is_not_a_prefix_keeps_the_answers_own_prefix_of_its_length():
    state = answered(text="Hello there friend")
    truncate(state, "t1", "Goodbye")  # 7 characters
    assert state.messages[-1] == StoredMessage(Role.ASSISTANT, "Hello t", 2, "t1")


def test_heard_text_longer_than_the_answer_never_lengthens_it():
    state = answered(text="Short answer.")
    truncate(state, "t1", "Short answer. And then something nobody said")
    assert state.messages[-1] == StoredMessage(Role.ASSISTANT, "Short answer.", 2, "t1")


def test_unknown_turn_ids_are_ignored():
    state = answered()
    before = list(state.messages)
    truncate(state, "nope", "")
    truncate(state, "nope", "Hello")
    assert state.messages == before
    assert state.truncations == []
    # the user's message is never touched, even if its turn id matches
    state = ConversationState(messages=[StoredMessage(Role.USER, "q", 1, "t9")])
    truncate(state, "t9", "")
    assert state.messages == [StoredMessage(Role.USER, "q", 1, "t9")]


def test_pending_truncations_are_bounded():
    assert PENDING_TRUNCATIONS == 4
    state = ConversationState()
    turns = [f"t{i}" for i in range(1, 7)]
    for turn_id in turns:
        enrich(state, turn_id)  # t1 in flight, t2..t6 waiting
    for turn_id in turns:
        truncate(state, turn_id, "Hello")
    assert [t.turn_id for t in state.truncations] == ["t3", "t4", "t5", "t6"]
    complete(state, "t1")  # its truncation was dropped: the whole answer stays
    assert state.messages[-1] == StoredMessage(Role.ASSISTANT, ANSWER, 7, "t1")
    assert len(state.truncations) == 4


def test_a_failed_turn_records_nothing_even_with_a_truncation():
    state = ConversationState()
    enrich(state, "t1")
    truncate(state, "t1", "Hello")
    complete(
        state,
        "t1",
        text="",
        finish_reason=FinishReason.ERROR,
        error=ErrorInfo("engine_failed", "boom"),
    )
    assert state.messages == []


# ---- withdrawn turns (the voice loop's guess that an utterance ended proved wrong) ---------
def withdraw(state, turn_id):
    on_truncated(state, Truncation(turn_id, "", withdrawn=True), count_tokens=words)


def test_withdrawal_of_a_recorded_turn_removes_its_question_and_answer():
    state = ConversationState()
    enrich(state, "t1", text="first")
    complete(state, "t1", text="One.", user_text="first")
    enrich(state, "t2")
    complete(state, "t2")
    assert [m.turn_id for m in state.messages] == ["t1", "t1", "t2", "t2"]
    withdraw(state, "t2")
    assert state.messages == [
        StoredMessage(Role.USER, "first", 1, "t1"),
        StoredMessage(Role.ASSISTANT, "One.", 1, "t1"),
    ]
    assert state.truncations == []
    withdraw(state, "t2")  # again (the next turn carries it too): nothing left to change
    assert state.messages == [
        StoredMessage(Role.USER, "first", 1, "t1"),
        StoredMessage(Role.ASSISTANT, "One.", 1, "t1"),
    ]
    assert state.truncations == []


def test_withdrawal_while_in_flight_records_nothing_and_still_releases_the_next_turn():
    state = ConversationState()
    enrich(state, "t1")  # in flight
    enrich(state, "t2")  # waits for it
    withdraw(state, "t1")
    assert state.messages == []
    assert state.truncations == [Truncation("t1", "", withdrawn=True)]
    decision = complete(state, "t1")
    assert state.messages == []  # neither its question nor its answer
    assert state.truncations == []
    assert [t.turn_id for t in decision.release] == ["t2"]
    assert state.in_flight is not None and state.in_flight.turn_id == "t2"
    assert state.waiting == []
    complete(state, "t2")
    assert state.messages == [
        StoredMessage(Role.USER, "q", 1, "t2"),
        StoredMessage(Role.ASSISTANT, ANSWER, 7, "t2"),
    ]


def test_withdrawal_of_a_waiting_turn_is_kept_until_its_completion():
    state = ConversationState()
    enrich(state, "t1")
    enrich(state, "t2")
    withdraw(state, "t2")
    assert state.truncations == [Truncation("t2", "", withdrawn=True)]
    complete(state, "t1")  # not t2's: recorded in full
    assert state.messages == [
        StoredMessage(Role.USER, "q", 1, "t1"),
        StoredMessage(Role.ASSISTANT, ANSWER, 7, "t1"),
    ]
    complete(state, "t2")
    assert [m.turn_id for m in state.messages] == ["t1", "t1"]
    assert state.truncations == []
    assert state.in_flight is None

"""The assembly table's transitions: one turn in flight per conversation, history from
completions, redeliveries recognised, floods refused, stale turns released."""

from __future__ import annotations

from harness.factories import completed, enriched, submitted
from schemas.events import (
    ErrorInfo,
    FinishReason,
    ImageInput,
    Role,
    ToolCall,
    ToolResult,
    TurnEnriched,
)
from schemas.tools import split_calls
from stream_jobs.assembly.app import _query
from stream_jobs.assembly.state import (
    ConversationState,
    HistoryLimits,
    StoredMessage,
    decode_state,
    encode_state,
    on_completed,
    on_enriched,
    on_stale,
)


def words(text: str) -> int:
    return len(text.split())


def enrich(state, turn, now=0.0, max_held=8):
    return on_enriched(state, turn, now_ms=now, max_held=max_held)


DEFAULT_LIMITS = HistoryLimits()


def complete(state, done, user_text="q", limits=DEFAULT_LIMITS, now=0.0):
    return on_completed(
        state, done, user_text=user_text, count_tokens=words, limits=limits, now_ms=now
    )


def test_a_turn_waits_for_the_one_in_flight_and_sees_it_in_history():
    state = ConversationState()
    first, second = enriched("t1", "first"), enriched("t2", "second")
    assert enrich(state, first).release == [first]
    assert enrich(state, second).release == []  # waits: its prompt must contain t1
    decision = complete(state, completed("t1", text="one two"), user_text="first")
    assert decision.release == [second]
    assert [(m.role, m.content, m.tokens) for m in state.messages] == [
        (Role.USER, "first", 1),
        (Role.ASSISTANT, "one two", 2),
    ]
    assert state.in_flight == second


def test_redeliveries_are_recognised():
    state = ConversationState()
    first, second = enriched("t1"), enriched("t2")
    enrich(state, first)
    enrich(state, second)
    assert enrich(state, first).release == [first]  # in flight: inference dedupes it
    assert enrich(state, second).release == []  # already waiting: not twice
    assert len(state.waiting) == 1
    complete(state, completed("t1"))
    assert complete(state, completed("t1")).release == []  # duplicate completion
    assert len(state.messages) == 2
    complete(state, completed("t2"))
    assert enrich(state, first).release == [first]  # answered: inference replays it
    assert state.in_flight is None and len(state.messages) == 4


def test_failed_turns_add_nothing_but_release_the_next():
    state = ConversationState()
    enrich(state, enriched("t1"))
    enrich(state, enriched("t2"))
    decision = complete(state, completed("t1", finish_reason=FinishReason.ERROR))
    assert [t.turn_id for t in decision.release] == ["t2"] and state.messages == []


def test_a_turn_that_ended_before_assembly_changes_nothing():
    state = ConversationState()
    enrich(state, enriched("t1"))
    assert complete(state, completed("bad-media", finish_reason=FinishReason.ERROR)).release == []
    assert state.in_flight is not None and state.in_flight.turn_id == "t1"


def test_a_flood_is_refused_with_a_retryable_busy_error():
    state = ConversationState()
    enrich(state, enriched("t1"), max_held=2)
    assert enrich(state, enriched("t2"), max_held=2).refuse == []
    [(turn, error)] = enrich(state, enriched("t3"), max_held=2).refuse
    assert turn.turn_id == "t3" and error.code == "conversation_busy" and error.retryable


def test_a_stale_turn_stops_blocking_its_conversation():
    state = ConversationState()
    enrich(state, enriched("t1"), now=0)
    enrich(state, enriched("t2"), now=1)
    assert on_stale(state, now_ms=500, stale_after_ms=1000).release == []
    assert [t.turn_id for t in on_stale(state, now_ms=1500, stale_after_ms=1000).release] == ["t2"]
    assert complete(state, completed("t1")).release == []  # too late: not recorded
    assert state.messages == []


def test_history_is_trimmed_by_whole_turns():
    state = ConversationState()
    limits = HistoryLimits(max_messages=4, max_chars=10_000)
    for i in range(4):
        enrich(state, enriched(f"t{i}"))
        complete(state, completed(f"t{i}", text=f"a{i}"), user_text=f"q{i}", limits=limits)
    assert [m.content for m in state.messages] == ["q2", "a2", "q3", "a3"]
    by_chars = HistoryLimits(max_messages=100, max_chars=5)
    enrich(state, enriched("t9"))
    complete(state, completed("t9", text="answer"), user_text="q9", limits=by_chars)
    assert [m.content for m in state.messages] == []  # one turn alone is over 5 chars


def test_stored_history_is_trimmed_a_block_of_turns_at_a_time():
    def firsts(block: float) -> list[str]:
        """The first stored message after each of 9 turns."""
        state, seen = ConversationState(), []
        limits = HistoryLimits(max_messages=8, max_chars=10_000, block=block)
        for i in range(9):
            enrich(state, enriched(f"t{i}"))
            complete(state, completed(f"t{i}", text=f"a{i}"), user_text=f"q{i}", limits=limits)
            seen.append(state.messages[0].content)
        assert len(state.messages) <= 8
        return seen

    # over 8 messages: down to 6 at once, so the start holds for the next turn
    assert firsts(0.25) == ["q0", "q0", "q0", "q0", "q2", "q2", "q4", "q4", "q6"]
    assert firsts(0.0) == ["q0", "q0", "q0", "q0", "q1", "q2", "q3", "q4", "q5"]


def test_state_round_trips_through_the_changelog_encoding():
    state = ConversationState()
    image = ImageInput(sha256="ab", tensor_key="px:ab", width=1, height=2, num_patches=576)
    enrich(state, enriched("t1", images=[image]))
    enrich(state, enriched("t2"))
    state.messages.append(StoredMessage(Role.USER, "hi", 1))
    assert decode_state(encode_state(state)) == state
    assert decode_state(None) == ConversationState()


def test_an_unreadable_row_starts_afresh_instead_of_stopping_the_job():
    assert decode_state(b'{"messages": "not a list"}') == ConversationState()


def test_a_retry_after_a_retryable_failure_is_answered_and_recorded():
    state = ConversationState()
    enrich(state, enriched("t1", "hello"))
    busy = ErrorInfo("conversation_busy", "later", retryable=True)
    complete(state, completed("t1", finish_reason=FinishReason.ERROR, error=busy))
    assert state.messages == [] and state.in_flight is None
    assert enrich(state, enriched("t1", "hello")).release  # the retry runs again...
    complete(state, completed("t1", text="hi"), user_text="hello")
    assert [m.content for m in state.messages] == ["hello", "hi"]  # ...and is recorded


def test_an_idle_conversation_forgets_its_history():
    state = ConversationState()
    on_enriched(state, enriched("t1"), now_ms=0, max_held=8, idle_expiry_ms=1000)
    complete(state, completed("t1"), now=10)
    on_enriched(state, enriched("t2"), now_ms=500, max_held=8, idle_expiry_ms=1000)
    assert len(state.messages) == 2  # active recently: kept
    complete(state, completed("t2"), now=600)
    on_enriched(state, enriched("t3"), now_ms=5000, max_held=8, idle_expiry_ms=1000)
    assert state.messages == []  # idle for 4.4 s > 1 s


def test_the_in_flight_turns_route_survives_a_restart_and_ends_with_it():
    """A redelivered in-flight turn goes back to the worker that has it (its route is in the
    table's changelog); the next turn is routed afresh."""
    from schemas.events import Route

    state = ConversationState()
    first, second = enriched("t1"), enriched("t2")
    enrich(state, first)
    enrich(state, second)
    state.in_flight_route = Route(pool="chat", worker_id="w1", partition=3)
    restored = decode_state(encode_state(state))  # the job restarted: the table is rebuilt
    assert restored.in_flight_route == Route(pool="chat", worker_id="w1", partition=3)
    assert complete(restored, completed("t1")).release == [second]
    assert restored.in_flight == second and restored.in_flight_route is None


def test_an_answers_tool_calls_stay_in_the_history_as_the_model_wrote_them():
    """The next turn returns their results: the model must see which calls it made."""
    state = ConversationState()
    enrich(state, enriched("t1", "weather in Oslo?"))
    call = ToolCall("call_t1_0", "get_weather", '{"city":"Oslo"}')
    done = completed(
        "t1", text="Checking.", finish_reason=FinishReason.TOOL_CALLS, tool_calls=[call]
    )
    complete(state, done, user_text="weather in Oslo?")
    stored = state.messages[-1]
    assert stored.role == Role.ASSISTANT
    assert stored.content.startswith("Checking.<tool_call>")
    assert split_calls(stored.content, "t1", whole=False)[1][0].arguments == '{"city":"Oslo"}'


def test_a_turn_that_returns_tool_results_reads_them_before_its_text():
    results = [ToolResult("call_t1_0", '{"sky":"clear"}', "get_weather")]
    turn = TurnEnriched(
        turn_id="t2",
        submitted=submitted("t2", text="and tomorrow?", tool_results=results),
        text="and tomorrow?",
    )
    query = _query(turn)
    assert query.index("<tool_response>") < query.index("and tomorrow?")
    assert '{\\"sky\\":\\"clear\\"}' in query and "get_weather" in query
    alone = TurnEnriched(
        turn_id="t3", submitted=submitted("t3", text="", tool_results=results), text=""
    )
    assert _query(alone).startswith("<tool_response>") and _query(alone).endswith(
        "</tool_response>"
    )

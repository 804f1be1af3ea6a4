"""The traces job's open turns, and their rebuild from already-processed events (pure)."""

from __future__ import annotations

from harness.factories import completed, enriched, submitted
from stream_jobs.traces.open_turns import TICK, OpenTurns, rebuild, replay_horizon_ms

S = 1000.0  # ms
TIMEOUT, GRACE = 900 * S, 30 * S


def test_a_turn_open_when_the_job_stopped_is_open_again_with_what_was_known():
    turns, emitted = rebuild(
        [(10 * S, submitted("a")), (11 * S, enriched("a", preprocess_ms=7.0))], TIMEOUT, GRACE
    )
    assert emitted == [] and len(turns) == 1
    assert turns.opened[b"a"] == 10 * S  # its clock runs from when it was first seen
    trace = turns.fold(completed("a"), 12 * S)  # the completion comes after the restart
    assert trace is not None and trace.preprocess_ms == 7.0 and len(turns) == 0


def test_a_turn_traced_before_the_stop_is_remembered_not_reopened():
    records = [(12 * S, completed("b")), (10 * S, submitted("b"))]  # topics read in any order
    turns, emitted = rebuild(records, TIMEOUT, GRACE)
    assert emitted == ["b"] and len(turns) == 0


def test_an_event_of_a_turn_already_traced_in_the_replay_does_not_reopen_it():
    """Read after the completion that traced it (the topics come in any order, and the
    timestamps of one turn's events can be equal): the live job skipped it as recent."""
    records = [(10 * S, submitted("h")), (10 * S, completed("h")), (10 * S, enriched("h"))]
    turns, emitted = rebuild(records, TIMEOUT, GRACE)
    assert emitted == ["h"] and len(turns) == 0


def test_a_turn_found_in_the_traces_topic_is_not_open_and_is_remembered():
    """Its completion was processed, traced and never committed before a crash: the replay
    (up to the committed offsets) leaves it open; its redelivered events must not trace it
    again."""
    records = [(10 * S, submitted("k")), (10 * S, submitted("m"))]
    turns, emitted = rebuild(records, TIMEOUT, GRACE, traced=["k"])
    assert emitted == ["k"] and set(turns.pending) == {b"m"}


def test_a_turn_the_clock_closed_before_the_stop_stays_closed():
    records = [(0.0, submitted("c")), (TIMEOUT + 5 * S, TICK)]
    turns, emitted = rebuild(records, TIMEOUT, GRACE)
    assert emitted == ["c"] and len(turns) == 0
    early = [(0.0, submitted("d")), (TIMEOUT - 5 * S, TICK)]  # not yet expired at that tick
    turns, emitted = rebuild(early, TIMEOUT, GRACE)
    assert emitted == [] and len(turns) == 1


def test_a_completion_whose_submission_is_before_the_horizon_is_dropped_by_a_replayed_tick():
    """Its trace went out before the horizon's window; the replay sees only the completion
    and must not keep it open (it would be dropped later as never submitted)."""
    stopped = 2 * TIMEOUT + 100 * S
    start = replay_horizon_ms(stopped, TIMEOUT, 10 * S)
    records = [(start + S, completed("e")), (start + TIMEOUT + 2 * S, TICK), (stopped, TICK)]
    turns, emitted = rebuild(records, TIMEOUT, GRACE)
    assert len(turns) == 0 and emitted == []


def test_the_horizon_reaches_two_timeouts_and_ticks_back():
    assert replay_horizon_ms(5_000 * S, TIMEOUT, 10 * S) == 5_000 * S - 2 * (TIMEOUT + 10 * S)


def test_a_completed_turn_waits_for_its_assembly_then_closes_after_the_grace():
    turns = OpenTurns()
    assert turns.fold(submitted("f"), 0.0) is None
    assert turns.fold(completed("f", assembled=True), S) is None
    assert turns.close_expired(S + GRACE - 1, TIMEOUT, GRACE) == []
    (closed,) = turns.close_expired(S + GRACE, TIMEOUT, GRACE)
    assert closed.key == b"f" and closed.trace is not None and closed.trace.completed is not None
    assert len(turns) == 0 and not turns.opened and not turns.awaiting


def test_a_turn_never_submitted_closes_without_a_trace():
    turns = OpenTurns()
    turns.fold(completed("g"), 0.0)
    (closed,) = turns.close_expired(TIMEOUT, TIMEOUT, GRACE)
    assert closed.trace is None and len(turns) == 0

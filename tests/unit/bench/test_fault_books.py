"""The books of the fault suite (`bench/faults/books.py`) on synthetic client histories:
what counts as accepted, lost, answered twice, refused, a whole text, a trace per turn."""

import math

from bench.faults.books import (
    Completion,
    Kind,
    Outcome,
    TurnHistory,
    assembled_text,
    balance,
    history_breaks,
    judge,
    open_at,
    recovery_s,
    slowest_touched_s,
    verdicts_of,
    was_accepted,
)

ANSWER = Completion(text="ab", finish_reason="stop")


def turn(*seen: tuple, turn_id: str = "t1", conversation: str = "c1", index: int = 1):
    """A history from (kind, fields...) tuples, one second apart."""
    history = TurnHistory("s", "u", conversation, f"ct-{turn_id}", index, 0.0, turn_id)
    for at, (kind, *rest) in enumerate(seen):
        fields = rest[0] if rest else {}
        history.add(float(at), kind, **fields)
    return history


def pos(epoch: int, offset: int, **more) -> dict:
    return {"epoch": epoch, "offset": offset, **more}


CLEAN = (
    (Kind.CREATE,),
    (Kind.ACCEPTED,),
    (Kind.STARTED, pos(1, 0)),
    (Kind.DELTA, pos(1, 1, text="a")),
    (Kind.DELTA, pos(1, 2, text="b")),
    (Kind.DONE, pos(1, 3, text="ab", code="stop")),
)


def test_a_clean_turn_balances():
    verdict = judge(turn(*CLEAN), [ANSWER], traces=1)
    assert verdict.outcome is Outcome.COMPLETED and verdict.text_ok
    assert verdict.records == 1 and verdict.recorded_as_seen and verdict.ended_at == 5.0
    books = balance([verdict])
    assert books.balanced and (books.accepted, books.completed, books.lost) == (1, 1, 0)


def test_a_failover_keeps_only_the_final_attempts_text():
    history = turn(
        (Kind.ACCEPTED,),
        (Kind.STARTED, pos(1, 0)),
        (Kind.DELTA, pos(1, 1, text="stale")),
        (Kind.RESTARTED, {"epoch": 2, "code": "worker_failover"}),
        (Kind.STARTED, pos(2, 0)),
        (Kind.DELTA, pos(2, 1, text="a")),
        (Kind.DELTA, pos(2, 2, text="b")),
        (Kind.DONE, pos(2, 3, text="ab", code="stop")),
    )
    verdict = judge(history, [ANSWER], traces=1)
    assert verdict.text_ok and verdict.restarted and balance([verdict]).balanced


def test_a_resumed_stream_is_put_together_by_position_and_a_repeat_is_caught():
    history = turn(
        *CLEAN[:4],
        (Kind.DISCONNECTED,),
        (Kind.RESUMED, pos(1, 1, code="resumed")),
        (Kind.DELTA, pos(1, 1, text="a")),  # sent again after the resume: a duplicate
        *CLEAN[4:],
    )
    assert assembled_text(history.seen, final_epoch=1) == ("ab", 1)  # text whole, one repeat
    verdict = judge(history, [ANSWER], traces=1)
    assert verdict.resumes == 1 and verdict.duplicate_frames == 1
    assert not balance([verdict]).balanced


def test_a_gap_in_the_stream_is_a_text_that_is_not_whole():
    history = turn(
        (Kind.ACCEPTED,),
        (Kind.DELTA, pos(1, 1, text="a")),
        (Kind.DONE, pos(1, 3, text="ab", code="stop")),
    )
    verdict = judge(history, [ANSWER], traces=1)
    assert verdict.text_ok is False
    assert balance([verdict]).text_mismatches == 1 and not balance([verdict]).balanced


def test_an_expired_resume_or_a_replayed_outcome_has_no_text_to_compare():
    expired = turn(
        (Kind.ACCEPTED,),
        (Kind.DELTA, pos(1, 1, text="a")),
        (Kind.RESUMED, pos(1, 1, code="expired")),
        (Kind.DONE, {"text": "ab", "code": "stop"}),
    )
    replayed = turn((Kind.ACCEPTED,), (Kind.DONE, {"text": "ab", "code": "stop"}))
    assert judge(expired, [ANSWER], 1).text_ok is None
    assert judge(replayed, [ANSWER], 1).text_ok is None
    assert balance([judge(replayed, [ANSWER], 1)]).balanced


def test_an_accepted_turn_without_an_end_is_lost():
    history = turn(*CLEAN[:4], (Kind.GAVE_UP,))
    verdict = judge(history, [], traces=0)
    assert verdict.outcome is Outcome.LOST and verdict.ended_at is None
    books = balance([verdict])
    assert books.lost == 1 and not books.balanced


def test_two_ends_at_the_client_are_a_double_answer():
    history = turn(*CLEAN, (Kind.DONE, pos(2, 9, text="ab", code="stop")))
    assert judge(history, [ANSWER], 1).outcome is Outcome.TWICE
    assert balance([judge(history, [ANSWER], 1)]).answered_twice == 1


def test_two_different_records_are_a_double_answer():
    other = Completion(text="another answer", finish_reason="stop", recording=("w2", 2.0))
    twice = balance([judge(turn(*CLEAN), [ANSWER, other], traces=1)])
    assert twice.answered_twice == 1 and not twice.balanced


def test_the_same_answer_decided_twice_unbalances_the_books_a_resent_record_does_not():
    """A redelivery that generated again (another worker, another time) decided the turn
    twice even when the text came out the same; the first try's record published again
    is one decision."""
    again = Completion(text="ab", finish_reason="stop", recording=("w2", 2.0))
    decided_twice = balance([judge(turn(*CLEAN), [ANSWER, again], traces=1)])
    assert decided_twice.answered_twice == 0 and decided_twice.recorded_twice == 1
    assert not decided_twice.balanced
    resent = balance([judge(turn(*CLEAN), [ANSWER, ANSWER], traces=1)])
    assert resent.recorded_twice == 0 and resent.resent == 1 and resent.balanced


def test_a_superseded_retryable_error_is_not_an_answer():
    busy = Completion(
        text="", finish_reason="error", error_code="conversation_busy", retryable=True
    )
    verdict = judge(turn(*CLEAN), [busy, ANSWER], traces=1)
    assert verdict.records == 1 and balance([verdict]).balanced


def test_the_client_seeing_another_answer_than_the_recorded_one_unbalances():
    verdict = judge(turn(*CLEAN), [Completion(text="xy", finish_reason="stop")], traces=1)
    assert verdict.recorded_as_seen is False
    assert balance([verdict]).not_as_recorded == 1 and not balance([verdict]).balanced


def test_an_explicit_error_is_a_clear_terminal_state():
    failed = turn(
        (Kind.ACCEPTED,),
        (Kind.DONE, {"text": "", "code": "error", "error": "engine_error"}),
    )
    refused_resume = turn(
        (Kind.ACCEPTED,), (Kind.DISCONNECTED,), (Kind.RESUME_REFUSED, {"code": "unknown_turn"})
    )
    record = Completion(text="", finish_reason="error", error_code="engine_error")
    books = balance([judge(failed, [record], 1), judge(refused_resume, [ANSWER], 1)])
    assert (books.clear_errors, books.lost) == (2, 0) and books.balanced
    assert books.error_codes == {"engine_error": 1, "unknown_turn": 1}


def test_a_refusal_before_acceptance_is_not_a_lost_turn_unless_answered_anyway():
    refused = turn((Kind.CREATE,), (Kind.REFUSED, {"code": "broker_unavailable"}), (Kind.GAVE_UP,))
    assert not was_accepted(refused)
    verdict = judge(refused, [], traces=0)
    books = balance([verdict])
    assert verdict.outcome is Outcome.REFUSED and verdict.ended_at == 1.0
    assert (books.accepted, books.refused, books.lost, books.phantoms) == (0, 1, 0, 0)
    assert books.refusal_codes == {"broker_unavailable": 1} and books.balanced
    assert balance([judge(refused, [ANSWER], traces=1)]).phantoms == 1


def test_a_retry_after_a_refusal_that_is_accepted_counts_once():
    history = turn((Kind.CREATE,), (Kind.REFUSED, {"code": "store_unavailable"}), *CLEAN)
    books = balance([judge(history, [ANSWER], traces=1)])
    assert (books.accepted, books.refused, books.completed) == (1, 0, 1)


def test_traces_must_be_one_row_per_accepted_turn():
    missing = balance([judge(turn(*CLEAN), [ANSWER], traces=0)])
    extra = balance([judge(turn(*CLEAN), [ANSWER], traces=2)])
    assert missing.traces_missing == 1 and not missing.traces_match
    assert extra.traces_extra == 1 and not extra.balanced
    unrecorded = balance([judge(turn(*CLEAN), [], traces=1)])
    assert unrecorded.unrecorded == 1 and not unrecorded.balanced


def test_recovery_lasts_until_every_turn_the_fault_touched_ended():
    before = judge(turn(*CLEAN), [ANSWER], 1)  # created 0, ended 5
    assert recovery_s([before], fault_at=2.0, healed_at=3.0) == 3.0
    assert recovery_s([before], fault_at=6.0, healed_at=7.0) == 0.0  # ended before it
    lost = judge(turn(*CLEAN[:3]), [], 0)
    assert math.isnan(recovery_s([before, lost], fault_at=2.0, healed_at=3.0))


def test_turns_open_at_a_moment_are_those_accepted_before_and_ended_after_it():
    clean = judge(turn(*CLEAN), [ANSWER], 1)  # created 0, ended 5
    assert open_at([clean], 2.0) == 1
    assert open_at([clean], 5.0) == 0  # it ended then
    refused = judge(turn((Kind.CREATE,), (Kind.REFUSED, {"code": "broker_unavailable"})), [], 0)
    assert open_at([refused], 0.5) == 0  # never accepted: nothing was open
    lost = judge(turn(*CLEAN[:3]), [], 0)
    assert open_at([lost], 100.0) == 1


def test_the_slowest_touched_turn_is_measured_from_its_creation_whatever_the_outage():
    clean = judge(turn(*CLEAN), [ANSWER], 1)  # took 5 s
    assert slowest_touched_s([clean], fault_at=2.0, healed_at=40.0) == 5.0
    assert slowest_touched_s([clean], fault_at=6.0, healed_at=7.0) == 0.0  # untouched
    lost = judge(turn(*CLEAN[:3]), [], 0)
    assert math.isnan(slowest_touched_s([clean, lost], fault_at=2.0, healed_at=3.0))


def test_verdicts_find_each_turns_records_by_its_id():
    histories = [turn(*CLEAN, turn_id="a"), turn(*CLEAN, turn_id="b")]
    verdicts = verdicts_of(histories, {"a": [ANSWER]}, {"a": 1, "b": 1})
    assert [v.records for v in verdicts] == [1, 0]


def test_an_answer_built_on_a_wrong_history_is_counted():
    def answered(index: int, said: int):
        text = f"You said: q (turn {said})"
        return turn(
            (Kind.ACCEPTED,),
            (Kind.DONE, {"text": text, "code": "stop"}),
            turn_id=f"t{index}",
            index=index,
        )

    good = [answered(1, 1), answered(2, 2)]
    lost_history = [answered(1, 1), answered(2, 1)]
    for histories, breaks in ((good, 0), (lost_history, 1)):
        verdicts = [judge(h, [], 1) for h in histories]
        assert history_breaks(histories, verdicts) == breaks


def scenario_result(*verdicts, fault_hit=None, notes=()):
    from bench.faults.runner import ScenarioResult

    return ScenarioResult(
        name="s",
        fault="f",
        books=balance(verdicts),
        recovery_s=recovery_s(verdicts, fault_at=2.0, healed_at=3.0),
        started_at=0.0,
        fault_at=2.0,
        healed_at=3.0,
        ended_at=9.0,
        streaming_at_fault=None,
        history_breaks=0,
        fault_hit=fault_hit,
        notes=list(notes),
    )


def test_a_faults_problems_name_each_way_its_books_fail():
    from bench.faults.runner import problems

    clean = judge(turn(*CLEAN), [ANSWER], 1)
    assert problems(scenario_result(clean)) == []
    lost = judge(turn(*CLEAN[:3], turn_id="t2"), [], 0)
    found = problems(scenario_result(clean, lost))
    assert "1 accepted turns lost" in found and "1 accepted turns not in turns.completed" in found
    assert problems(scenario_result(clean, fault_hit=False)) == ["the fault hit nothing in flight"]
    assert problems(scenario_result(clean, notes=["died on their own: sink (exit 1)"])) == [
        "died on their own: sink (exit 1)"
    ]
    assert problems(scenario_result()) == ["no turn was accepted"]

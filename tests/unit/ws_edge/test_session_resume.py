"""Resume at the session level: the log and the live stream overlap without duplicates, a
failover or an expired history is said plainly, and limits hold."""

from harness.factories import completed
from schemas.events import TokenChunk, TurnStarted
from schemas.turn_log import START, LogPosition, ResumePlan
from tests.unit.ws_edge.test_session import authed, frame, make_session, only_error
from ws_edge.actions import ResumeTurn, Send
from ws_edge.errors import UnknownTurn
from ws_edge.messages import (
    ResponseDelta,
    ResponseDone,
    ResponseRestarted,
    ResponseResumed,
    ResponseStarted,
)

P = LogPosition


def chunk(seq: int, text: str, attempt: str = "a1") -> TokenChunk:
    return TokenChunk(turn_id="t1", seq=seq, text=text, emitted_at_ms=1.0, attempt=attempt)


def sent(actions) -> list:
    return [a.event for a in actions if isinstance(a, Send)]


def resuming(after: LogPosition = START):
    session = authed()
    [ask] = session.receive(
        frame(type="response.resume", turn_id="t1", epoch=after.epoch, offset=after.offset)
    )
    assert isinstance(ask, ResumeTurn)
    assert (ask.turn_id, ask.after, ask.owner) == ("t1", after, '["acme","alice"]')
    assert session.resume_found("t1", "c1", after) == []
    return session


def test_live_frames_wait_for_the_log_and_overlaps_are_dropped():
    session = resuming(P(1, 1))
    # live frames arrive while the log is read: held
    assert session.relay(chunk(3, "c"), P(1, 3)) == []
    assert session.relay(chunk(4, "d"), P(1, 4)) == []
    log = [(chunk(2, "b"), P(1, 2)), (chunk(3, "c"), P(1, 3))]  # overlaps the live ones
    events = sent(session.resume_loaded("t1", ResumePlan("resumed", P(1, 1)), log))
    assert isinstance(events[0], ResponseResumed)
    assert (events[0].status, events[0].conversation_id, events[0].finished) == (
        "resumed",
        "c1",
        False,
    )
    deltas = [e for e in events if isinstance(e, ResponseDelta)]
    assert [(d.text, d.epoch, d.offset) for d in deltas] == [("b", 1, 2), ("c", 1, 3), ("d", 1, 4)]
    assert sent(session.relay(chunk(4, "d"), P(1, 4))) == []  # a duplicate later: dropped
    [done] = sent(session.relay(completed("t1", text="abcd"), P(1, 5)))
    assert isinstance(done, ResponseDone) and (done.epoch, done.offset) == (1, 5)
    assert "t1" not in session.open_turns


def test_a_join_from_the_start_gets_the_whole_answer():
    session = resuming()
    started = TurnStarted(turn_id="t1", worker_id="w", model="m", attempt="a1")
    log = [(started, P(1, 0)), (chunk(0, "hi"), P(1, 1))]
    events = sent(session.resume_loaded("t1", ResumePlan("resumed", START), log))
    assert [type(e) for e in events] == [ResponseResumed, ResponseStarted, ResponseDelta]
    assert events[1].epoch == 1 and events[1].offset == 0


def test_a_failover_since_the_position_restarts_the_answer():
    session = resuming(P(1, 7))
    started = TurnStarted(turn_id="t1", worker_id="w2", model="m", attempt="a2")
    log = [(started, P(2, 0)), (chunk(0, "new", "a2"), P(2, 1))]
    events = sent(session.resume_loaded("t1", ResumePlan("restarted", P(2, -1)), log))
    assert events[0].status == "restarted" and (events[0].epoch, events[0].offset) == (2, -1)
    assert not any(isinstance(e, ResponseRestarted) for e in events)  # said once, by resumed
    assert [e.text for e in events if isinstance(e, ResponseDelta)] == ["new"]
    # the old attempt's frames are older than the position: never shown
    assert sent(session.relay(chunk(8, "old"), P(1, 8))) == []


def test_an_expired_history_ends_with_the_recorded_answer():
    session = resuming(P(1, 3))
    outcome = completed("t1", text="the whole answer")
    events = sent(session.resume_loaded("t1", ResumePlan("expired", P(1, 3)), [], outcome))
    assert events[0].status == "expired" and events[0].finished
    assert isinstance(events[1], ResponseDone) and events[1].text == "the whole answer"
    assert "t1" not in session.open_turns


def test_resume_needs_one_target_and_authentication():
    session = authed()
    err = only_error(session.receive(frame(type="response.resume")))
    assert err.code == "invalid_message"
    err = only_error(
        session.receive(frame(type="response.resume", turn_id="t1", conversation_id="c1"))
    )
    assert err.code == "invalid_message"
    err = only_error(session.receive(frame(type="response.resume", turn_id="t1", offset=-5)))
    assert err.code == "invalid_message"  # offsets start at -1
    err = only_error(make_session().receive(frame(type="response.resume", turn_id="t1")))
    assert err.code == "unauthenticated"


def test_resuming_a_turn_already_streaming_here_or_past_the_limit_is_refused():
    session = resuming()
    err = only_error(session.receive(frame(type="response.resume", turn_id="t1")))
    assert err.code == "invalid_message"
    err = only_error(session.resume_found("t1", "c1", START))
    assert err.code == "invalid_message"
    full = authed(max_open_turns=1)
    full.resume_found("t9", "c1", START)
    err = only_error(full.receive(frame(type="response.resume", turn_id="t1")))
    assert err.code == "too_many_turns"


def test_a_failed_lookup_closes_the_pending_route():
    session = resuming()
    err = only_error(session.resume_failed("t1", UnknownTurn("no turn 't1' of yours")))
    assert err.code == "unknown_turn" and err.turn_id == "t1"
    assert session.open_turns == []
    # frames for it now go nowhere
    assert session.relay(chunk(0, "x"), P(1, 0)) == []


def test_a_retried_turn_shows_its_log_then_what_was_held_once():
    """A retry whose first try is answering already: the log read after the publish comes
    before the frames held meanwhile, where they overlap once, from the first frame."""
    session = authed()
    [submit] = session.receive(frame(type="turn.create", conversation_id="c1", text="hi"))
    turn_id = submit.turn.turn_id
    started = TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt="a1")

    def piece(seq: int, text: str) -> TokenChunk:
        return TokenChunk(turn_id=turn_id, seq=seq, text=text, emitted_at_ms=1.0, attempt="a1")

    assert session.relay(piece(2, "c"), P(1, 3)) == []  # live, while the log is read: held
    log = [(started, P(1, 0)), (piece(0, "a"), P(1, 1)), (piece(1, "b"), P(1, 2))]
    log.append((piece(2, "c"), P(1, 3)))  # also in the log
    events = sent(session.submit_succeeded(turn_id, log))
    assert [type(e).__name__ for e in events] == [
        "TurnAccepted",
        "ResponseStarted",
        "ResponseDelta",
        "ResponseDelta",
        "ResponseDelta",
    ]
    assert "".join(e.text for e in events if isinstance(e, ResponseDelta)) == "abc"


def test_a_retried_turn_whose_log_is_gone_ends_with_its_recorded_outcome():
    session = authed()
    [submit] = session.receive(frame(type="turn.create", conversation_id="c1", text="hi"))
    turn_id = submit.turn.turn_id
    outcome = completed(turn_id, conversation_id="c1", text="the whole answer")
    events = sent(session.submit_succeeded(turn_id, [], outcome))
    assert type(events[0]).__name__ == "TurnAccepted"
    assert isinstance(events[-1], ResponseDone) and events[-1].text == "the whole answer"
    assert turn_id not in session.open_turns

"""The TTS worker's sequencer: pieces released in order, duplicates and cancels."""

from __future__ import annotations

from schemas.events import FinishReason, SpeechAudio, SpeechText
from workers.tts.sequencer import Admission, Outgoing, SpeechSequencer


def piece(
    index: int,
    *,
    turn_id: str = "t1",
    attempt: str = "a1",
    edge_id: str = "e1",
    final: bool = False,
) -> SpeechText:
    return SpeechText(
        turn_id=turn_id,
        conversation_id="c1",
        edge_id=edge_id,
        attempt=attempt,
        voice="joe",
        index=index,
        text=f"piece {index}. ",
        char_start=10 * index,
        final=final,
        finish_reason=FinishReason.STOP if final else None,
    )


def audio(p: SpeechText, *, final: bool | None = None, stopped: str = "") -> SpeechAudio:
    return SpeechAudio(
        turn_id=p.turn_id,
        attempt=p.attempt,
        index=p.index,
        text=p.text,
        char_start=p.char_start,
        sample_rate=16000,
        pcm=bytes([p.index]) * 4,
        final=p.final if final is None else final,
        stopped=stopped,
    )


def stop_frame(p: SpeechText, reason: str) -> SpeechAudio:
    """What the service releases in place of a cancelled turn's final piece."""
    return SpeechAudio(
        turn_id=p.turn_id,
        attempt=p.attempt,
        index=p.index,
        text="",
        char_start=p.char_start,
        sample_rate=22050,
        final=True,
        stopped=reason,
    )


def test_in_order_completion_is_released_at_once():
    seq = SpeechSequencer()
    p0, p1 = piece(0), piece(1)
    assert seq.admit(p0) == Admission.SPEAK
    assert seq.done(p0, audio(p0)) == [Outgoing("e1", audio(p0))]
    assert seq.admit(p1) == Admission.SPEAK
    assert seq.done(p1, audio(p1)) == [Outgoing("e1", audio(p1))]


def test_out_of_order_completion_is_released_in_index_order():
    seq = SpeechSequencer()
    p0, p1, p2, p3 = (piece(i) for i in range(4))
    for p in (p0, p1, p2, p3):
        assert seq.admit(p) == Admission.SPEAK
    assert seq.done(p2, audio(p2)) == []
    assert seq.done(p1, audio(p1)) == []
    assert seq.done(p0, audio(p0)) == [
        Outgoing("e1", audio(p0)),
        Outgoing("e1", audio(p1)),
        Outgoing("e1", audio(p2)),
    ]
    assert seq.done(p3, audio(p3)) == [Outgoing("e1", audio(p3))]
    assert seq.open_turns == 1


def test_redelivered_pieces_are_duplicates():
    seq = SpeechSequencer()
    p0, p1, p2 = piece(0), piece(1), piece(2)
    for p in (p0, p1, p2):
        seq.admit(p)
    assert seq.done(p1, audio(p1)) == []
    assert seq.admit(p1) == Admission.DUPLICATE  # synthesized, waiting for p0
    assert seq.done(p0, audio(p0)) == [Outgoing("e1", audio(p0)), Outgoing("e1", audio(p1))]
    assert seq.admit(p0) == Admission.DUPLICATE  # released already
    assert seq.admit(p1) == Admission.DUPLICATE
    assert seq.admit(p2) == Admission.SPEAK  # not done yet: still to speak
    # a second synthesis of a released piece is not released twice
    assert seq.done(p0, audio(p0)) == []


def test_cancel_before_any_piece_skips_them_and_the_final_releases_a_stop():
    seq = SpeechSequencer()
    assert seq.cancel("t1", "barge_in", sample_rate=22050) == []  # nothing known yet
    assert seq.cancelled("t1") == "barge_in"
    assert seq.cancelled("t2") == ""
    p0, p1, last = piece(0), piece(1), piece(2, final=True)
    assert seq.admit(p0) == Admission.SKIP
    assert seq.done(p0, None) == []  # skipped: nothing released in its place
    assert seq.admit(p0) == Admission.DUPLICATE  # ...but the turn moved past it
    assert seq.admit(p1) == Admission.SKIP
    assert seq.done(p1, None) == []
    assert seq.admit(last) == Admission.SKIP
    stop = stop_frame(last, "barge_in")
    assert seq.done(last, stop) == [Outgoing("e1", stop)]
    assert seq.open_turns == 0
    assert seq.admit(piece(3)) == Admission.DUPLICATE  # the turn's speech ended


def test_skipped_pieces_out_of_order_still_release_the_stop():
    seq = SpeechSequencer()
    seq.cancel("t1", "cancelled", sample_rate=22050)
    p0, last = piece(0), piece(1, final=True)
    seq.admit(p0)
    seq.admit(last)
    stop = stop_frame(last, "cancelled")
    assert seq.done(last, stop) == []  # waits for piece 0
    assert seq.done(p0, None) == [Outgoing("e1", stop)]


def test_cancel_of_an_open_turn_ends_it_with_one_stopped_frame():
    seq = SpeechSequencer()
    p0, p1, p2 = piece(0, edge_id="edge-7"), piece(1, edge_id="edge-7"), piece(2, edge_id="edge-7")
    seq.admit(p0)
    assert seq.done(p0, audio(p0)) == [Outgoing("edge-7", audio(p0))]
    seq.admit(p1)
    seq.admit(p2)
    assert seq.done(p2, audio(p2)) == []  # waits for p1, which is being synthesized
    stops = seq.cancel("t1", "barge_in", sample_rate=22050)
    assert stops == [
        Outgoing(
            "edge-7",
            SpeechAudio(
                turn_id="t1",
                attempt="a1",
                index=1,  # where the turn's audio stopped
                text="",
                char_start=0,
                sample_rate=22050,
                final=True,
                stopped="barge_in",
            ),
        )
    ]
    assert seq.open_turns == 0
    assert seq.done(p1, audio(p1)) == []  # finished after the cancel: dropped
    assert seq.admit(piece(3, edge_id="edge-7")) == Admission.DUPLICATE
    assert seq.admit(piece(4, edge_id="edge-7", final=True)) == Admission.DUPLICATE
    assert seq.cancel("t1", "barge_in", sample_rate=22050) == []  # no second stop


def test_cancel_touches_only_its_turn():
    seq = SpeechSequencer()
    a, b = piece(0, turn_id="t1"), piece(0, turn_id="t2", edge_id="e2")
    seq.admit(a)
    seq.admit(b)
    [out] = seq.cancel("t1", "cancelled", sample_rate=16000)
    assert out.edge_id == "e1" and out.audio.turn_id == "t1"
    assert seq.admit(piece(1, turn_id="t2", edge_id="e2")) == Admission.SPEAK
    assert seq.done(b, audio(b)) == [Outgoing("e2", audio(b))]


def test_a_final_frame_closes_the_turn():
    seq = SpeechSequencer()
    p0, p1, p2 = piece(0), piece(1, final=True), piece(2)
    for p in (p0, p1, p2):
        seq.admit(p)
    assert seq.done(p2, audio(p2)) == []
    assert seq.done(p1, audio(p1)) == []
    # p1 is final: p2 (after the end) is never released
    assert seq.done(p0, audio(p0)) == [Outgoing("e1", audio(p0)), Outgoing("e1", audio(p1))]
    assert seq.open_turns == 0
    assert seq.admit(piece(3)) == Admission.DUPLICATE
    assert seq.done(piece(3), audio(piece(3))) == []
    assert seq.cancel("t1", "cancelled", sample_rate=16000) == []  # ended already


def test_a_stopped_final_frame_from_synthesis_closes_the_turn():
    seq = SpeechSequencer()
    p0 = piece(0)
    seq.admit(p0)
    failed = audio(p0, final=True, stopped="error")
    assert seq.done(p0, failed) == [Outgoing("e1", failed)]
    assert seq.admit(piece(1)) == Admission.DUPLICATE


def test_two_attempts_of_a_turn_are_independent():
    seq = SpeechSequencer()
    old0, old1 = piece(0, attempt="a1"), piece(1, attempt="a1")
    seq.admit(old0)
    seq.admit(old1)
    assert seq.done(old0, audio(old0)) == [Outgoing("e1", audio(old0))]
    # the worker failed over: the second attempt's pieces count from 0 again
    new0, new1 = piece(0, attempt="a2"), piece(1, attempt="a2", final=True)
    assert seq.admit(new0) == Admission.SPEAK
    assert seq.done(new0, audio(new0)) == [Outgoing("e1", audio(new0))]
    assert seq.admit(new1) == Admission.SPEAK
    assert seq.done(new1, audio(new1)) == [Outgoing("e1", audio(new1))]
    assert seq.open_turns == 1  # a1 is still open: a2 ending did not close it
    assert seq.admit(piece(2, attempt="a1")) == Admission.SPEAK
    assert seq.done(old1, audio(old1)) == [Outgoing("e1", audio(old1))]


def test_cancel_stops_every_open_attempt_of_the_turn():
    seq = SpeechSequencer()
    a1, a2 = piece(0, attempt="a1"), piece(0, attempt="a2")
    seq.admit(a1)
    seq.admit(a2)
    stops = seq.cancel("t1", "barge_in", sample_rate=16000)
    assert [(o.audio.attempt, o.audio.index, o.audio.stopped) for o in stops] == [
        ("a1", 0, "barge_in"),
        ("a2", 0, "barge_in"),
    ]


def test_tracked_turns_are_bounded_oldest_first():
    seq = SpeechSequencer(max_tracked=3)
    for turn_id in ("t1", "t2", "t3", "t4"):
        p = piece(0, turn_id=turn_id)
        assert seq.admit(p) == Admission.SPEAK
        assert seq.done(p, audio(p)) == [Outgoing("e1", audio(p))]
    assert seq.open_turns == 3  # t1 was forgotten
    assert seq.admit(piece(0, turn_id="t4")) == Admission.DUPLICATE
    assert seq.admit(piece(0, turn_id="t3")) == Admission.DUPLICATE
    # t1 forgotten: its redelivered piece looks new (and evicts t2, now the oldest)
    assert seq.admit(piece(0, turn_id="t1")) == Admission.SPEAK
    assert seq.admit(piece(0, turn_id="t2")) == Admission.SPEAK
    assert seq.open_turns == 3


def test_cancelled_turns_are_bounded_oldest_first():
    seq = SpeechSequencer(max_tracked=3)
    for turn_id in ("t1", "t2", "t3", "t4"):
        seq.cancel(turn_id, f"why-{turn_id}", sample_rate=16000)
    assert seq.cancelled("t1") == ""
    assert [seq.cancelled(t) for t in ("t2", "t3", "t4")] == ["why-t2", "why-t3", "why-t4"]
    # cancelling again refreshes t2: t3 goes first now
    seq.cancel("t2", "again", sample_rate=16000)
    seq.cancel("t5", "why-t5", sample_rate=16000)
    assert seq.cancelled("t3") == ""
    assert seq.cancelled("t2") == "again"

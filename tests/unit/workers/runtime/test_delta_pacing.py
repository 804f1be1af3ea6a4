"""Answer chunks joined per turn: the first goes at once, sooner ones wait for the pace and
leave as one, order and attempts kept."""

from __future__ import annotations

import math

import pytest

from schemas.events import TokenChunk
from workers.runtime.delta_pacing import DeltaPacer

A = ("edge-1", "turn-a")
B = ("edge-1", "turn-b")


def chunk(seq: int, text: str, *, attempt: str = "a1", call_index: int = -1) -> TokenChunk:
    return TokenChunk(
        turn_id="t",
        seq=seq,
        text=text,
        emitted_at_ms=float(seq),
        attempt=attempt,
        call_index=call_index,
    )


def test_the_first_chunk_goes_at_once_and_sooner_ones_wait_to_be_joined():
    pacer = DeltaPacer(0.05)
    assert pacer.offer(A, chunk(0, "Hel"), 1.00) == ([chunk(0, "Hel")], math.inf)
    assert pacer.offer(A, chunk(1, "lo"), 1.02) == ([], 1.05)
    assert pacer.offer(A, chunk(2, ","), 1.04) == ([], 1.05)
    joined = pacer.due(A, 1.05)
    assert joined is not None and (joined.seq, joined.text) == (1, "lo,")  # the first's seq
    assert pacer.due(A, 1.06) is None


def test_a_chunk_after_a_quiet_pace_goes_at_once():
    pacer = DeltaPacer(0.05)
    pacer.offer(A, chunk(0, "a"), 1.0)
    assert pacer.offer(A, chunk(1, "b"), 1.05) == ([chunk(1, "b")], math.inf)
    assert pacer.offer(A, chunk(2, "c"), 1.2) == ([chunk(2, "c")], math.inf)


def test_turns_are_paced_apart():
    pacer = DeltaPacer(0.05)
    pacer.offer(A, chunk(0, "a"), 1.0)
    assert pacer.offer(B, chunk(0, "x"), 1.01) == ([chunk(0, "x")], math.inf)
    assert pacer.offer(A, chunk(1, "b"), 1.01) == ([], 1.05)


def test_another_frame_of_the_turn_takes_the_held_chunk_first_and_the_end_forgets_it():
    pacer = DeltaPacer(0.05)
    pacer.offer(A, chunk(0, "a"), 1.0)
    pacer.offer(A, chunk(1, "b"), 1.01)
    held = pacer.before(A, ends=True)
    assert held is not None and held.text == "b"
    assert pacer.due(A, 1.05) is None and len(pacer) == 0
    assert pacer.offer(A, chunk(0, "again"), 1.02)[0] == [chunk(0, "again")]


def test_chunks_of_another_attempt_or_tool_call_are_not_joined():
    pacer = DeltaPacer(0.05)
    pacer.offer(A, chunk(0, "a"), 1.0)
    pacer.offer(A, chunk(1, "b"), 1.01)
    ready, due = pacer.offer(A, chunk(0, "new", attempt="a2"), 1.02)
    assert [c.text for c in ready] == ["b"] and due == pytest.approx(1.07)
    ready, due = pacer.offer(A, chunk(1, '{"x"', attempt="a2", call_index=0), 1.03)
    assert [c.text for c in ready] == ["new"]
    held = pacer.due(A, 1.08)
    assert held is not None and (held.text, held.call_index) == ('{"x"', 0)


def test_drain_gives_every_held_chunk_and_old_send_times_can_be_forgotten():
    pacer = DeltaPacer(0.05)
    pacer.offer(A, chunk(0, "a"), 1.0)
    pacer.offer(A, chunk(1, "b"), 1.01)
    pacer.offer(B, chunk(0, "x"), 1.0)
    pacer.forget_before(2.0)
    assert len(pacer) == 1  # A still holds a chunk: kept
    assert [(k, c.text) for k, c in pacer.drain()] == [(A, "b")]
    assert pacer.due(A, 1.05) is None


def test_no_pace_is_no_pacer():
    with pytest.raises(ValueError):
        DeltaPacer(0)

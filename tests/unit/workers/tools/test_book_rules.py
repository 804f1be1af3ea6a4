"""The exactly-once books' rules: run once, replay after, wait for a live claim, and never
run a dead claim's side effect again (its outcome is unknown; a read-only call reruns)."""

from __future__ import annotations

from workers.tools.book_rules import (
    BookEntry,
    BookState,
    Step,
    decode_entry,
    encode_entry,
    next_step,
)

CLAIM = BookEntry(BookState.CLAIMED, "w1", claimed_at_ms=1000.0, deadline_ms=16_000.0)
DONE = BookEntry(BookState.DONE, "w1", 1000.0, 1000.0, output="stored k", outcome="ok")


def test_a_call_runs_once_and_is_replayed_after():
    assert next_step(None, now_ms=0.0, read_only=False) == Step.RUN
    for read_only in (False, True):
        assert next_step(DONE, now_ms=99e9, read_only=read_only) == Step.REPLAY


def test_a_live_claim_is_waited_for_and_a_dead_ones_side_effect_never_runs_again():
    assert next_step(CLAIM, now_ms=15_999.0, read_only=False) == Step.WAIT
    assert next_step(CLAIM, now_ms=16_000.0, read_only=False) == Step.UNKNOWN
    assert next_step(CLAIM, now_ms=16_000.0, read_only=True) == Step.RERUN


def test_entries_round_trip_and_an_unreadable_one_counts_as_a_dead_claim():
    assert decode_entry(encode_entry(DONE)) == DONE
    assert decode_entry(None) is None
    garbled = decode_entry(b"{not json")
    assert garbled is not None
    assert next_step(garbled, now_ms=0.0, read_only=False) == Step.UNKNOWN

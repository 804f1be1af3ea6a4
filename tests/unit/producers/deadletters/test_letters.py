"""Which dead letters are shown and re-driven: selections by reason, topic, time and
reference; markers of committed re-drives make a letter done; markers are never letters."""

from __future__ import annotations

from producers.deadletters.letters import (
    REDRIVE_OF,
    DeadLetter,
    Selection,
    redriven,
    summary,
    to_redrive,
)


def letter(offset: int, topic: str = "ns.turns.submitted", code: str = "bad", at: int = 0):
    headers = {"source_topic": topic, "error_code": code, "error": "why"}
    return DeadLetter(0, offset, at, b"k", b"{}", headers)


def marker(offset: int, of: str) -> DeadLetter:
    return DeadLetter(0, offset, 0, b"redrive", b"", {REDRIVE_OF: of, "source_topic": "x"})


LETTERS = [
    letter(0, code="invalid_row", at=100),
    letter(1, topic="ns.traces", at=200),
    letter(2, at=300),
    marker(3, "0/2"),
    letter(4, code="invalid_row", at=400),
]


def test_everything_but_markers_is_selected_by_default():
    waiting, done = to_redrive(LETTERS, Selection(), "ns")
    assert [x.offset for x in waiting] == [0, 1, 4] and [x.offset for x in done] == [2]
    assert redriven(LETTERS) == {"0/2"}


def test_selections_combine():
    by_code = Selection(codes=frozenset({"invalid_row"}))
    assert [x.offset for x in to_redrive(LETTERS, by_code, "ns")[0]] == [0, 4]
    by_bare_topic = Selection(topics=frozenset({"traces"}))
    assert [x.offset for x in to_redrive(LETTERS, by_bare_topic, "ns")[0]] == [1]
    by_full_topic = Selection(topics=frozenset({"ns.traces"}))
    assert [x.offset for x in to_redrive(LETTERS, by_full_topic, "ns")[0]] == [1]
    by_time = Selection(since_ms=150, until_ms=400)
    assert [x.offset for x in to_redrive(LETTERS, by_time, "ns")[0]] == [1]
    by_ref = Selection(refs=frozenset({"0/4", "0/3"}))  # a marker's ref is no letter
    assert [x.offset for x in to_redrive(LETTERS, by_ref, "ns")[0]] == [4]


def test_summary_counts_by_topic_and_code():
    assert summary(LETTERS) == {
        ("ns.turns.submitted", "invalid_row"): 2,
        ("ns.traces", "bad"): 1,
        ("ns.turns.submitted", "bad"): 1,
    }

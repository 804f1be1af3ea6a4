"""Which text of a spoken answer was heard, from how far its audio played."""

from __future__ import annotations

import pytest

from ws_edge.voice.audio_timeline import AudioTimeline


def timeline(*pieces: tuple[str, float]) -> AudioTimeline:
    t = AudioTimeline()
    for text, duration_ms in pieces:
        t.add(text, duration_ms)
    return t


TWO = (("Hello there, ", 1000.0), ("how are you?", 500.0))


def test_pieces_play_back_to_back():
    t = AudioTimeline()
    assert t.total_ms == 0.0
    t.add("Hello there, ", 1000.0)
    t.add("how are you?", 500.0)
    assert t.total_ms == 1500.0


def test_nothing_heard_at_zero():
    assert timeline(*TWO).heard(0.0) == ""
    assert timeline(*TWO).heard(-5.0) == ""


def test_nothing_heard_of_an_empty_timeline():
    assert AudioTimeline().heard(1000.0) == ""


def test_mid_first_piece_keeps_whole_words_only():
    t = timeline(*TWO)
    # 70% of 13 characters = 9: "Hello the|re" cuts "there" in half: not heard
    assert t.heard(700.0) == "Hello "
    # 50% = 6 characters: the cut falls right after the space
    assert t.heard(500.0) == "Hello "
    # 30% = 3 characters: "Hel|lo", the first word cut in half: nothing heard
    assert t.heard(300.0) == ""


@pytest.mark.parametrize(
    ("at_ms", "heard"),
    [
        (200.0, "Hi"),  # 2 chars: the cut is on the space after "Hi"
        (300.0, "Hi "),  # 3 chars: right after the space
        (500.0, "Hi "),  # 5 chars: "yo|u" cut
        (600.0, "Hi you"),  # 6 chars: on the space after "you"
        (950.0, "Hi you "),  # 9 chars: "al|l" cut
        (1000.0, "Hi you all"),
    ],
)
def test_word_cuts_inside_one_piece(at_ms, heard):
    assert timeline(("Hi you all", 1000.0)).heard(at_ms) == heard


def test_exactly_at_piece_boundaries():
    t = timeline(*TWO)
    assert t.heard(1000.0) == "Hello there, "
    assert t.heard(1500.0) == "Hello there, how are you?"


def test_mid_second_piece_adds_its_whole_words():
    # 250 of 500 ms into "how are you?": 6 characters, "are" cut after "ar"
    assert timeline(*TWO).heard(1250.0) == "Hello there, how "


def test_a_piece_counts_as_heard_within_a_millisecond_of_its_end():
    # clients report whole or rounded milliseconds (ROUNDING_MS = 1)
    t = timeline(*TWO)
    assert t.heard(999.0) == "Hello there, "
    assert t.heard(998.9) == "Hello there,"  # 12 of 13 characters: the cut is on the space
    assert t.heard(1499.0) == "Hello there, how are you?"


def test_beyond_the_end_everything_is_heard():
    assert timeline(*TWO).heard(10_000.0) == "Hello there, how are you?"


def test_cjk_without_spaces_keeps_characters_proportionally():
    t = timeline(("你好世界。", 500.0))
    assert t.heard(200.0) == "你好"
    assert t.heard(300.0) == "你好世"
    assert t.heard(450.0) == "你好世界"
    assert t.heard(500.0) == "你好世界。"


def test_a_lone_ascii_word_cut_in_half_is_not_heard():
    assert timeline(("Supercalifragilistic", 1000.0)).heard(500.0) == ""


def test_a_zero_length_piece_is_heard_once_reached():
    t = timeline(("One. ", 100.0), ("", 0.0), ("Two.", 100.0))
    assert t.heard(100.0) == "One. "
    assert t.heard(150.0) == "One. "  # "Tw|o." cut
    assert t.heard(200.0) == "One. Two."

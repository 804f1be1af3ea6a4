"""Output windowing: overlap, boundaries, bounds, determinism."""

from __future__ import annotations

import itertools

import pytest

from moderation.windows import Window, Windower


def stream(words: list[str], size: int, overlap: int) -> list[Window]:
    windower = Windower(size, overlap)
    windows = [w for word in words for w in windower.push(word, 1)]
    last = windower.finish()
    return [*windows, last] if last else windows


def test_windows_every_size_tokens_with_overlap():
    words = [f"w{i} " for i in range(12)]
    windows = stream(words, size=5, overlap=2)
    assert [w.text for w in windows] == [
        "w0 w1 w2 w3 w4 ",
        "w3 w4 w5 w6 w7 w8 w9 ",
        "w8 w9 w10 w11 ",
    ]
    assert [w.tokens for w in windows] == [5, 5, 2]
    assert [w.final for w in windows] == [False, False, True]
    assert [w.index for w in windows] == [0, 1, 2]


def test_offsets_are_absolute_and_new_text_tiles_the_answer():
    words = [f"word{i} " for i in range(23)]
    answer = "".join(words)
    windows = stream(words, size=4, overlap=1)
    assert windows[0].new_start == 0
    for before, after in itertools.pairwise(windows):
        assert after.new_start == before.end_char  # nothing skipped, nothing twice
    assert windows[-1].end_char == len(answer)
    for w in windows:
        assert answer[w.start_char : w.end_char] == w.text
        assert w.start_char <= w.new_start <= w.end_char


def test_phrase_split_across_a_boundary_is_seen_whole():
    tokens = ["Sure", ",", " here", " is", " how", " to", " build", " a", " pipe", " bomb", "."]
    windows = stream(tokens, size=9, overlap=3)  # boundary falls between "pipe" and "bomb"
    assert not any("pipe bomb" in w.text for w in windows[:1])
    assert any("pipe bomb" in w.text for w in windows)


def test_empty_stream_has_no_window():
    windower = Windower()
    assert windower.push("", 3) == []
    assert windower.finish() is None


def test_finish_after_an_exact_boundary_returns_none():
    windower = Windower(size=2, overlap=1)
    assert len(windower.push("a ", 1) + windower.push("b ", 1)) == 1
    assert windower.finish() is None


def test_huge_single_token_is_split_into_bounded_windows():
    windower = Windower(size=50, overlap=10, max_chars=4096, max_overlap_chars=512)
    windows = windower.push("x" * 100_000, 1)
    last = windower.finish()
    assert last is not None
    windows.append(last)
    assert all(len(w.text) <= 4096 + 512 for w in windows)
    assert sum(w.end_char - w.new_start for w in windows) == 100_000
    assert sum(w.tokens for w in windows) == 1


def test_multi_token_delta_is_kept_whole():
    windower = Windower(size=5, overlap=2)
    (window,) = windower.push("one two three four five six seven", 7)
    assert window.text == "one two three four five six seven" and window.tokens == 7


def test_overlap_zero_means_disjoint_windows():
    windows = stream([f"{i} " for i in range(6)], size=3, overlap=0)
    assert [w.text for w in windows] == ["0 1 2 ", "3 4 5 "]


def test_memory_stays_bounded_on_a_long_answer():
    windower = Windower(size=50, overlap=10)
    for i in range(20_000):
        windower.push(f"t{i} ", 1)
    assert len(windower._buffer) < 2_000
    assert len(windower._pieces) < 100


def test_deterministic():
    words = [f"w{i} " for i in range(101)]
    assert stream(words, 7, 3) == stream(words, 7, 3)


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (5, 5), (5, -1)])
def test_invalid_configuration(size, overlap):
    with pytest.raises(ValueError):
        Windower(size, overlap)


def test_misuse_raises():
    windower = Windower()
    with pytest.raises(ValueError):
        windower.push("x", -1)
    windower.finish()
    with pytest.raises(RuntimeError):
        windower.push("x", 1)
    with pytest.raises(RuntimeError):
        windower.finish()


def test_a_short_first_window_then_full_ones():
    windower = Windower(5, 2, first_size=2)
    words = [f"w{i} " for i in range(9)]
    windows = [w for word in words for w in windower.push(word, 1)]
    assert [w.text for w in windows] == ["w0 w1 ", "w0 w1 w2 w3 w4 w5 w6 "]
    assert [w.tokens for w in windows] == [2, 5]
    assert [w.new_start for w in windows] == [0, len("w0 w1 ")]


@pytest.mark.parametrize("first_size", [0, 6])
def test_a_first_window_outside_one_to_size_is_refused(first_size):
    with pytest.raises(ValueError):
        Windower(5, 2, first_size=first_size)

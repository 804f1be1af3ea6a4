"""The TTS text segmenter's rules, on exact segment texts.

Every example goes through `cut`, which segments the text fed whole and fed character by
character and requires both to agree, so each rule is also checked for split-independence.
"""

# ruff: noqa: RUF001  (CJK and typographic punctuation are what is tested)

from __future__ import annotations

import random

import pytest

from workers.inference.speech.segments import SegmenterConfig, TextSegment, TextSegmenter


def segments_of(chunks: list[str], config: SegmenterConfig) -> list[TextSegment]:
    segmenter = TextSegmenter(config)
    out: list[TextSegment] = []
    for chunk in chunks:
        out += segmenter.feed(chunk)
    out += segmenter.flush()
    assert segmenter.pending == ""
    return out


def check_invariants(segments: list[TextSegment], text: str, config: SegmenterConfig) -> None:
    assert "".join(s.text for s in segments) == text
    offset = 0
    for number, segment in enumerate(segments):
        assert segment.index == number
        assert segment.text
        assert (segment.char_start, segment.char_end) == (offset, offset + len(segment.text))
        assert len(segment.text.rstrip()) <= config.hard_max_chars
        offset = segment.char_end
    for segment in segments[1:]:
        assert not segment.text[0].isspace(), segment
    for segment in segments[:-1]:
        assert len(segment.text) >= config.min_chars, segment


def cut(text: str, min_chars: int = 10, max_chars: int = 20, hard: int = 120) -> list[str]:
    config = SegmenterConfig(min_chars=min_chars, max_chars=max_chars, hard_max_chars=hard)
    whole = segments_of([text], config)
    assert segments_of(list(text), config) == whole
    check_invariants(whole, text, config)
    return [s.text for s in whole]


# --- boundaries -------------------------------------------------------------------------


def test_sentence_ends() -> None:
    assert cut("Hello there. How are you today? I am fine!") == [
        "Hello there. ",
        "How are you today? ",
        "I am fine!",
    ]


def test_no_cut_before_min_chars() -> None:
    assert cut("Hi. Yes. Okay then, sure.") == ["Hi. Yes. Okay then, ", "sure."]
    assert cut("Hi. Yes. Okay then, sure.", min_chars=1) == [
        "Hi. ",
        "Yes. ",
        "Okay then, ",
        "sure.",
    ]


def test_clause_punctuation() -> None:
    assert cut("First of all, we go; then: we stop — maybe – or not.") == [
        "First of all, ",
        "we go; then: ",
        "we stop — maybe – ",
        "or not.",
    ]


def test_runs_of_marks_and_ellipsis() -> None:
    assert cut("Really?! Yes... I think so.", min_chars=1) == [
        "Really?! ",
        "Yes... ",
        "I think so.",
    ]
    assert cut("Wait… what? Okay.", min_chars=1) == ["Wait… ", "what? ", "Okay."]


def test_closing_quotes_and_brackets_go_with_the_mark() -> None:
    assert cut('He said "Hi." Then (he left.) Gone.', min_chars=1) == [
        'He said "Hi." ',
        "Then (he left.) ",
        "Gone.",
    ]


def test_trailing_whitespace_belongs_to_the_segment_before() -> None:
    assert cut("Hello there.   Next one here.") == ["Hello there.   ", "Next one here."]
    segmenter = TextSegmenter()
    assert segmenter.feed("Hello there. ") == []  # more whitespace may follow
    assert segmenter.pending == "Hello there. "
    assert [s.text for s in segmenter.feed("N")] == ["Hello there. "]
    assert segmenter.pending == "N"


def test_newline() -> None:
    assert cut("Here is the first line\nand here the second\n\nThird.") == [
        "Here is the first line\n",
        "and here the second\n\n",
        "Third.",
    ]
    # lines shorter than min_chars are not cut
    assert cut("Hi\nthere\nfriends all\n") == ["Hi\nthere\nfriends all\n"]
    # a newline beats an abbreviation
    assert cut("Ask the Dr.\nHe knows.", min_chars=1) == ["Ask the Dr.\n", "He knows."]


def test_weak_boundaries_only_past_max_chars() -> None:
    assert cut("The result (which we expected) was good and the rest - as usual - followed") == [
        "The result (which we expected) ",
        "was good and the rest - ",
        "as usual - followed",
    ]
    assert cut("Short (yes) text here.") == ["Short (yes) text here."]
    assert cut("我们说「好」然后走了", min_chars=1, max_chars=5) == ["我们说「好」", "然后走了"]


# --- never cut inside -------------------------------------------------------------------


def test_numbers() -> None:
    assert cut("Pi is 3.14, e is 2.718 and .5 is half; we sold 1,000,000 at 10:30 in v1.2.3.") == [
        "Pi is 3.14, ",
        "e is 2.718 and .5 is half; ",
        "we sold 1,000,000 at 10:30 in v1.2.3.",
    ]
    assert cut("I counted 3. Then I left.") == ["I counted 3. ", "Then I left."]


def test_number_split_across_feeds() -> None:
    segmenter = TextSegmenter()
    assert segmenter.feed("The answer is 3.") == []  # "3." + "14" must not be cut
    assert segmenter.pending == "The answer is 3."
    assert [s.text for s in segmenter.feed("14, more or less. ")] == ["The answer is 3.14, "]
    assert [s.text for s in segmenter.flush()] == ["more or less. "]


def test_abbreviations() -> None:
    assert cut("Dr. Smith arrived. Mrs. Jones and Mr. Brown left.", min_chars=1) == [
        "Dr. Smith arrived. ",
        "Mrs. Jones and Mr. Brown left.",
    ]
    assert cut("Ms. Li, Prof. Xu, DR. Who and St. Louis vs. Paris.", min_chars=1) == [
        "Ms. Li, ",
        "Prof. Xu, ",
        "DR. Who and St. Louis vs. Paris.",
    ]
    assert cut("We met at 10 a.m. and left at 5 p.m. in the U.S. today.", min_chars=1) == [
        "We met at 10 a.m. and left at 5 p.m. in the U.S. today."
    ]
    assert cut("Use fruit e.g. apples i.e. food.", min_chars=1) == [
        "Use fruit e.g. apples i.e. food."
    ]


def test_single_letter_initials() -> None:
    assert cut("Talk to J. Smith. Now.", min_chars=1) == ["Talk to J. Smith. ", "Now."]
    assert cut("Read J. R. R. Tolkien.", min_chars=1) == ["Read J. R. R. Tolkien."]


def test_no_before_a_digit() -> None:
    assert cut("See No. 5 please. No. I won't.", min_chars=1) == [
        "See No. 5 please. ",
        "No. ",
        "I won't.",
    ]


def test_etc_ends_a_sentence_only_before_a_capital() -> None:
    assert cut("Apples, pears, etc. Then more.", min_chars=1) == [
        "Apples, ",
        "pears, ",
        "etc. ",
        "Then more.",
    ]
    assert cut("Bring pens etc. and paper.", min_chars=1) == ["Bring pens etc. and paper."]
    assert cut("Bring pens etc.", min_chars=1) == ["Bring pens etc."]


def test_list_numbers_at_line_start() -> None:
    assert cut("Steps:\n1. Open it.\n2. Close it.", min_chars=1) == [
        "Steps:\n",
        "1. Open it.\n",
        "2. Close it.",
    ]
    assert cut("Intro\n3. Go now.", min_chars=8) == ["Intro\n3. Go now."]
    assert cut("Intro 3. Go now.", min_chars=8) == ["Intro 3. ", "Go now."]


def test_urls_and_emails() -> None:
    text = "Go to https://example.com/a.b?x=1,2 now, or www.example.org. Mail bob@example.com, ok."
    assert cut(text, min_chars=1) == [
        "Go to https://example.com/a.b?x=1,2 now, ",
        "or www.example.org. ",
        "Mail bob@example.com, ",
        "ok.",
    ]


# --- CJK --------------------------------------------------------------------------------


def test_cjk() -> None:
    text = "你好。今天天气很好，我们去公园吧！"
    assert cut(text) == ["你好。今天天气很好，", "我们去公园吧！"]  # characters, not bytes
    assert cut(text, min_chars=2) == ["你好。", "今天天气很好，", "我们去公园吧！"]
    assert cut("他说：「你好。」然后走了。", min_chars=2) == ["他说：", "「你好。」", "然后走了。"]
    assert cut("真的吗？！太好了、对。", min_chars=2) == ["真的吗？！", "太好了、", "对。"]


def test_cjk_mark_waits_for_the_next_character() -> None:
    segmenter = TextSegmenter(SegmenterConfig(min_chars=2))
    assert segmenter.feed("你好。") == []  # a closing bracket may follow
    assert [s.text for s in segmenter.feed("今")] == ["你好。"]
    assert segmenter.pending == "今"


# --- no boundary ------------------------------------------------------------------------


def test_hard_max_cuts_at_the_last_whitespace() -> None:
    text = "word " * 20
    assert cut(text, max_chars=20, hard=40) == ["word " * 8, "word " * 8, "word " * 4]
    segmenter = TextSegmenter(SegmenterConfig(hard_max_chars=40))
    assert segmenter.feed(text[:40]) == []  # no boundary: wait up to hard_max_chars
    assert [s.text for s in segmenter.feed(text[40])] == ["word " * 8]


def test_hard_max_without_whitespace_cuts_hard() -> None:
    assert cut("x" * 100, hard=40) == ["x" * 40, "x" * 40, "x" * 20]
    # the only whitespace would leave less than min_chars: cut hard
    assert cut("a " + "b" * 60, hard=40) == ["a " + "b" * 38, "b" * 22]
    assert cut("see https://example.com/" + "p" * 30, min_chars=1, hard=20) == [
        "see ",
        "https://example.com/",
        "p" * 20,
        "p" * 10,
    ]


def test_default_waits_for_punctuation_up_to_hard_max() -> None:
    text = "a long run of words without any punctuation at all " * 3
    segmenter = TextSegmenter()
    assert segmenter.feed(text[:120]) == []
    assert [s.text for s in segmenter.feed(text[120:])] == [text[:116]]
    assert [s.text for s in segmenter.flush()] == [text[116:]]


# --- config, empty input, lifecycle -----------------------------------------------------


@pytest.mark.parametrize(("low", "high", "hard"), [(0, 20, 120), (10, 5, 120), (10, 20, 15)])
def test_config_validation(low: int, high: int, hard: int) -> None:
    with pytest.raises(ValueError, match="1 <= min_chars <= max_chars <= hard_max_chars"):
        SegmenterConfig(min_chars=low, max_chars=high, hard_max_chars=hard)


def test_config_edges_are_valid() -> None:
    assert cut("ab. cd", min_chars=1, max_chars=1, hard=1) == ["a", "b", ". ", "c", "d"]
    assert SegmenterConfig() == SegmenterConfig(10, 20, 120)


def test_empty_input() -> None:
    segmenter = TextSegmenter()
    assert segmenter.feed("") == []
    assert segmenter.flush() == []
    assert TextSegmenter().flush() == []


def test_whitespace_only_answer_is_one_segment() -> None:
    segmenter = TextSegmenter()
    assert segmenter.feed("  \n ") == []
    assert segmenter.flush() == [TextSegment(0, "  \n ", 0, 4)]


def test_offsets_and_indices() -> None:
    segmenter = TextSegmenter(SegmenterConfig(min_chars=1))
    out = segmenter.feed("One. Two. Th") + segmenter.flush()
    assert out == [
        TextSegment(0, "One. ", 0, 5),
        TextSegment(1, "Two. ", 5, 10),
        TextSegment(2, "Th", 10, 12),
    ]


def test_flush_ends_the_answer() -> None:
    segmenter = TextSegmenter()
    segmenter.feed("Hi")
    assert [s.text for s in segmenter.flush()] == ["Hi"]
    assert segmenter.flush() == []
    with pytest.raises(RuntimeError, match="new one per answer"):
        segmenter.feed("more")


# --- split-independence -----------------------------------------------------------------

PARAGRAPH = (
    "Dr. Smith said the answer is 3.14, not 3. Really! See https://example.com/a.b?x=1,2 "
    "or write to bob@example.com; we meet at 10:30 a.m. in the U.S. office, No. 5.\n"
    "Steps:\n1. Install v1.2.3 first.\n2. Run it, e.g. twice, etc. Then relax…\n"
    "你好。今天天气很好，我们去公园吧！ The result (which we expected) was fine - mostly. "
    + "a long run without any punctuation at all that keeps going on and on and on " * 3
    + "Done.  "
)

PARAGRAPH_SEGMENTS = [
    "Dr. Smith said the answer is 3.14, ",
    "not 3. Really! ",
    "See https://example.com/a.b?x=1,2 or write to bob@example.com; ",
    "we meet at 10:30 a.m. in the U.S. office, ",
    "No. 5.\nSteps:\n",  # "No. 5." and its line are shorter than min_chars
    "1. Install v1.2.3 first.\n",
    "2. Run it, ",
    "e.g. twice, ",
    "etc. Then relax…\n",
    "你好。今天天气很好，",
    "我们去公园吧！ The result (which we expected) ",
    "was fine - mostly. ",
    "a long run without any punctuation at all that keeps going on and on and on "
    "a long run without any punctuation at all ",
    "that keeps going on and on and on "
    "a long run without any punctuation at all that keeps going on and on and on Done.  ",
]


def random_chunks(text: str, rng: random.Random) -> list[str]:
    chunks, i = [], 0
    while i < len(text):
        size = rng.randint(0, 6) if rng.random() < 0.9 else rng.randint(7, 60)
        chunks.append(text[i : i + size])
        i += size
    return chunks


def test_paragraph_segments() -> None:
    assert cut(PARAGRAPH) == PARAGRAPH_SEGMENTS


@pytest.mark.parametrize(
    "config",
    [SegmenterConfig(), SegmenterConfig(1, 1, 30), SegmenterConfig(5, 40, 60)],
)
def test_split_independence_over_random_splits(config: SegmenterConfig) -> None:
    reference = segments_of([PARAGRAPH], config)
    check_invariants(reference, PARAGRAPH, config)
    rng = random.Random(20240611)
    for _ in range(300):
        assert segments_of(random_chunks(PARAGRAPH, rng), config) == reference


def test_split_independence_on_random_text() -> None:
    """Random strings of the characters the rules look at, with random configs."""
    alphabet = [*"ab XJ3.,!?;:\n\t-—…()\"'。，」「", "e.g.", "Dr.", "No.", "etc.", " 1."]
    rng = random.Random(7)
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        low = rng.randint(1, 8)
        high = rng.randint(low, 16)
        config = SegmenterConfig(low, high, rng.randint(high, 24))
        reference = segments_of([text], config)
        check_invariants(reference, text, config)
        assert segments_of(list(text), config) == reference
        for _ in range(5):
            assert segments_of(random_chunks(text, rng), config) == reference


def test_a_smaller_first_hard_max_gets_the_first_piece_out_at_a_word_boundary() -> None:
    config = SegmenterConfig(first_hard_max_chars=24)
    text = "You said: What is the capital of France? It is a long way to Paris, my friend."
    expected = [
        "You said: What is the ",
        "capital of France? ",
        "It is a long way to Paris, ",
        "my friend.",
    ]
    assert [s.text for s in segments_of([text], config)] == expected
    rng = random.Random(5)
    for _ in range(50):  # the same pieces however the stream is split
        cuts = sorted(rng.sample(range(1, len(text)), 8))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert [s.text for s in segments_of(chunks, config)] == expected


def test_first_hard_max_is_validated() -> None:
    with pytest.raises(ValueError, match="first_hard_max_chars"):
        SegmenterConfig(min_chars=10, first_hard_max_chars=5)
    with pytest.raises(ValueError, match="first_hard_max_chars"):
        SegmenterConfig(hard_max_chars=120, first_hard_max_chars=200)

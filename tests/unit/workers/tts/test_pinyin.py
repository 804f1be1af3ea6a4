"""Han characters → pinyin for espeak-ng's Mandarin voice (pure)."""

from __future__ import annotations

from workers.tts.pinyin import hanzi_to_pinyin


def test_han_characters_become_tone_numbered_syllables():
    assert hanzi_to_pinyin("你好") == "ni3 hao3"
    assert hanzi_to_pinyin("吗") == "ma5"  # the neutral tone is 5


def test_a_polyphonic_character_gets_the_reading_of_its_word():
    assert hanzi_to_pinyin("银行") == "yin2 hang2"  # bank: hang2, not xing2
    assert hanzi_to_pinyin("行走") == "xing2 zou3"


def test_chinese_punctuation_becomes_ascii_and_other_text_is_kept():
    assert hanzi_to_pinyin("你好，世界！") == "ni3 hao3 , shi4 jie4 !"  # noqa: RUF001
    assert hanzi_to_pinyin("OK 2026") == "OK 2026"

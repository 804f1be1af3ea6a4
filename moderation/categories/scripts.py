"""Which encoder reads a text: USE multilingual knows 16 languages' scripts (Latin,
Cyrillic, Arabic, Han, kana, Hangul, Thai, Greek); for text written mostly in another script
(Devanagari, Bengali, Tamil, Hebrew...) its embedding is noise, so e5 reads it instead."""

from __future__ import annotations

import unicodedata

# Unicode script families (by the first word of a letter's name) USE multilingual was trained on.
_USE_SCRIPTS = frozenset(
    {
        "LATIN", "CYRILLIC", "ARABIC", "CJK", "HIRAGANA", "KATAKANA", "HANGUL", "THAI",
        "GREEK", "FULLWIDTH", "HALFWIDTH",
    }
)  # fmt: skip
SAMPLE_LETTERS = 200  # enough to decide; a window has ~250 characters


def _script(char: str) -> str:
    name = unicodedata.name(char, "")
    return name.split(" ", 1)[0]


def use_can_read(text: str) -> bool:
    """True when most letters (of the first SAMPLE_LETTERS) are in a script USE knows; a text
    without letters (numbers, emoji) goes to USE too, the cheaper encoder."""
    known = other = 0
    for char in text:
        if not char.isalpha():
            continue
        if _script(char) in _USE_SCRIPTS:
            known += 1
        else:
            other += 1
        if known + other >= SAMPLE_LETTERS:
            break
    return known >= other

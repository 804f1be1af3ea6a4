"""Which language a text is in, roughly enough to answer a refusal in it (pure, ~10 µs).

By script first (Han, kana, Hangul, Arabic, Devanagari, Cyrillic); Latin text by counting
a few very common words of English, Spanish, French, German, Portuguese and Italian.
Unknown or mixed text is English.
"""

from __future__ import annotations

import re

DEFAULT = "en"
_SCRIPTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ja", re.compile(r"[\u3040-\u30ff]")),  # kana before Han: Japanese uses both
    ("ko", re.compile(r"[\uac00-\ud7af]")),
    ("zh", re.compile(r"[\u4e00-\u9fff]")),
    ("ar", re.compile(r"[\u0600-\u06ff]")),
    ("hi", re.compile(r"[\u0900-\u097f]")),
    ("ru", re.compile(r"[\u0400-\u04ff]")),
)
_STOPWORDS = {
    "en": {"the", "and", "is", "you", "to", "of", "how", "what", "my", "it", "for", "me"},
    "es": {"el", "la", "que", "de", "y", "los", "las", "por", "para", "cómo", "como", "una"},
    "fr": {"le", "la", "les", "et", "est", "que", "des", "pour", "comment", "je", "une", "un"},
    "de": {"der", "die", "das", "und", "ist", "ich", "wie", "nicht", "ein", "eine", "mit"},
    "pt": {"o", "os", "que", "de", "e", "não", "como", "para", "uma", "um", "você", "é"},
    "it": {"il", "che", "di", "e", "non", "come", "per", "una", "un", "sono", "mi", "gli"},
}  # fmt: skip
_WORD = re.compile(r"[^\W\d_]+")
SAMPLE_CHARS = 400


def detect(text: str) -> str:
    """A language code (en, zh, es, fr, de, ar, hi, ru, ja, ko, pt, it); English by default."""
    sample = text[:SAMPLE_CHARS]
    letters = sum(ch.isalpha() for ch in sample) or 1
    for code, pattern in _SCRIPTS:
        if len(pattern.findall(sample)) * 4 >= letters:  # a quarter of the letters or more
            return code
    words = _WORD.findall(sample.casefold())
    best, best_hits = DEFAULT, 0
    for code, common in _STOPWORDS.items():
        hits = sum(word in common for word in words)
        if hits > best_hits:
            best, best_hits = code, hits
    return best


LATIN = frozenset({"en", "es", "fr", "de", "pt", "it"})


def latin_script(text: str) -> bool:
    """Whether `text` is written mostly in Latin letters: the English profanity model reads
    only such text (in Chinese, Russian or Hindi around "kill -9" it saw only the English
    word and flagged a process manual; the category classifier reads every script)."""
    return detect(text) in LATIN

"""Han characters → tone-numbered pinyin, so espeak-ng can speak Chinese (pure).

The espeak-ng Debian ships reads Han characters with an English fallback (tone digits
spoken as English numbers); its `cmn-latn-pinyin` voice speaks Mandarin syllables written
as pinyin with tone numbers. pypinyin (MIT, its dictionary in the wheel) does the reading,
word by word so that polyphonic characters get the reading of their word.
"""

from __future__ import annotations

# Chinese full-width punctuation (comma, full stop, question and exclamation marks,
# semicolon, colon, enumeration comma, brackets) → ASCII, which espeak-ng pauses on
PUNCTUATION = str.maketrans("\uff0c\u3002\uff1f\uff01\uff1b\uff1a\u3001\uff08\uff09", ",.?!;:,()")


def hanzi_to_pinyin(text: str) -> str:
    """`text` with each Han character as a pinyin syllable (`ni3 hao3`); other text kept."""
    from pypinyin import Style, lazy_pinyin

    pieces = lazy_pinyin(
        text.translate(PUNCTUATION), style=Style.TONE3, neutral_tone_with_five=True
    )
    return " ".join(p.strip() for p in pieces if p.strip())

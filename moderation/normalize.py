"""Text normalisation against obfuscation, so one rule matches the many spellings of a phrase.

Rules are written against the normalised form: NFKC (fullwidth and math letters → ASCII),
casefold, invisible and control characters removed (Unicode "tag" characters, used to smuggle
hidden ASCII, are decoded instead), Latin diacritics dropped ("ïgnörë" → "ignore"), Cyrillic
and Greek look-alikes mapped to Latin, letters spaced out ("k i l l", "k.i.l.l") joined,
leetspeak mapped (0→o 1→i 3→e 4→a 5→s 7→t @→a $→s) where it touches a letter, runs of
three or more of the same letter squeezed to one ("kiiill" → "kill", at the price of
"killll" → "kil"), and masked ("f*ck", "b*mb") or scrambled ("ignroe") spellings of a few
keywords restored.

Cost is bounded: only the first `HEAD_CHARS` and last `TAIL_CHARS` characters are looked at
(12 KiB of characters, more than the longest user turn `TURNSTREAM_MAX_TURN_CHARS`, 8000, so
a turn is screened whole; an output window is far smaller). Everything is a handful of
C-level passes (`str.translate`, `re.sub`, `unicodedata.normalize`) over that slice.
"""

# ruff: noqa: RUF001, RUF002  (look-alike characters are this module's subject)
from __future__ import annotations

import base64
import binascii
import codecs
import functools
import re
import unicodedata

HEAD_CHARS = 8192
TAIL_CHARS = 4096

# Zero-width, bidi controls, soft hyphen, word joiners, BOM, interlinear annotation marks,
# variation selectors (incl. the supplement, used for "emoji smuggling"), and C0/C1 controls
# other than whitespace: removed, so "ig\u200bnore" and "ig\x00nore" read "ignore".
_INVISIBLE = re.compile(
    "[\x00-\x08\x0e-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
    "\U0001d173-\U0001d17a\U000e0000-\U000e001f\U000e007f-\U000e01ef]"
)
# Unicode tag characters U+E0020..U+E007E mirror printable ASCII and render as nothing:
# "ASCII smuggling" hides instructions in them, so they are decoded, not dropped.
_TAGS = {cp: cp - 0xE0000 for cp in range(0xE0020, 0xE007F)}
_WHITESPACE = re.compile(r"\s+")
_LATIN_MARKS = re.compile(r"(?<=[a-z])[\u0300-\u036f]+")

# Look-alikes, lower case (they apply after casefold).
_HOMOGLYPH_MAP = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o",
    "р": "p", "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i",
    "ј": "j", "ԁ": "d", "һ": "h", "ԛ": "q", "ԝ": "w", "ь": "b", "п": "n", "г": "r",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ε": "e", "η": "n", "ι": "i", "κ": "k", "μ": "u",
    "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ω": "w", "ϲ": "c",
    # Latin specials NFKC keeps
    "ı": "i", "ł": "l", "ø": "o", "đ": "d", "ɡ": "g", "ɑ": "a", "ǝ": "e",
}  # fmt: skip
_HOMOGLYPHS = str.maketrans(_HOMOGLYPH_MAP)
_HOMOGLYPH_CLASS = "[" + "".join(_HOMOGLYPH_MAP) + "]"
# Anchored at a word's start ((?<!\S)): unanchored, \S* would rescan a long word from every
# position (quadratic on a 12 KiB "word").
_TOKEN_WITH_HOMOGLYPH = re.compile(rf"(?<!\S)\S*{_HOMOGLYPH_CLASS}\S*")
_ASCII_LETTER = re.compile("[a-z]")
_NON_LATIN_LETTER = re.compile("[\u0370-\u03ff\u0400-\u04ff]")
_OTHER_LETTER = re.compile(rf"(?!{_HOMOGLYPH_CLASS})[^\W\d_a-z]")

_LEET_MAP = {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"}
_LEET = re.compile(r"(?<=[^\W\d_])[013457@$]|[013457@$](?=[^\W\d_])")
_LEET_WORD = re.compile(r"(?<!\S)\S*[013457@$]\S*")
_PUNCTUATION = "\"'()[]{}<>.,;:!?"
# Words whose digits are not leetspeak (the rules mention some: "rot13").
_TECH_WORDS = frozenset(
    [
        "rot13",
        "rot47",
        "md5",
        "sha1",
        "s3",
        "ec2",
        "mp3",
        "mp4",
        "ipv4",
        "h264",
        "x86",
        "i386",
        "p2p",
        "web3",
        "win32",
        "utf8",
        "l10n",
        "i18n",
        "k8s",
        "a11y",
        "python3",
        "c4",
        "gpt4",
        "gpt3",
        "gpt35",
        "3d",
        "4k",
        "1st",
        "3rd",
        "4th",
        "5th",
        "7th",
    ]
)
# Three or more single characters with the same separator between them: "k i l l",
# "k.i.l.l"; inside a word, single letters joined by dots or stars ("t.o"), or pieces of
# one or two letters joined by two or more of them ("st.u.p.i.d").
_SPACED = re.compile(
    r"(?<!\S)[^\W_]([ .\-_*·])(?:[^\W_]\1)+[^\W_](?!\S)"
    r"|(?:(?<![^\W_])[^\W_][.*·])+[^\W_](?![^\W_])"
    r"|(?:(?<![^\W_])[^\W_]{1,2}[.*·]){2,}[^\W_]{1,2}(?![^\W_])"
)
_SEPARATORS = re.compile(r"[ .\-_*·]")
_SQUEEZE = re.compile(r"([^\W\d_])\1{2,}")

# Scrambled spellings of the words attacks are made of ("ignroe all prevoius
# insturctions" reads fine to a model): a word with the same first and last letter and the
# same letters in between is read as the keyword. Only these keywords, so ordinary words
# are left alone.
_TYPO_WORDS = (
    "ignore", "previous", "instructions", "instruction", "disregard", "prompt", "system",
    "reveal", "forget", "guidelines", "restrictions", "bypass", "jailbreak", "unfiltered",
    "uncensored", "explosive", "explosives", "override", "developer", "directives",
    "filters", "confidential", "hidden", "policy", "content", "censorship",
)  # fmt: skip
_TYPO_KEYS = {(w[0], w[-1], "".join(sorted(w[1:-1]))): w for w in _TYPO_WORDS}
_TYPO_CANDIDATE = re.compile(r"\b[a-z]{5,14}\b")

# Masked spellings ("f*ck", "b*mb", "sh#t"): a word with * or # in place of letters is read
# as the one keyword it can stand for (a run of k marks stands for k or k+1 letters); only
# the first MAX_MASKED such words of a text are looked at.
_MASK_WORDS = (
    "fuck", "fucking", "fucker", "shit", "bitch", "cunt", "dick", "asshole", "whore", "slut",
    "nigger", "faggot", "bomb", "bombs", "kill", "meth", "rape", "explosive", "explosives",
    "suicide", "ignore", "instructions", "prompt", "porn",
)  # fmt: skip
_MASKED = re.compile(r"(?<![^\W\d_*#])[^\W\d_]*(?:[*#]+[^\W\d_]*)+")
MAX_MASKED = 64


def cap(text: str, head: int = HEAD_CHARS, tail: int = TAIL_CHARS) -> str:
    """The part of `text` that is screened: all of it when short, else its head and tail
    (an injection appended after a long paste is still seen; the middle of a huge one is not,
    which is why the caller also bounds a turn's length)."""
    if len(text) <= head + tail:
        return text
    return text[:head] + "\n" + text[-tail:] if tail else text[:head]


def _strip_invisible(text: str) -> str:
    return _INVISIBLE.sub("", text.translate(_TAGS))


def _drop_latin_diacritics(text: str) -> str:
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", _LATIN_MARKS.sub("", unicodedata.normalize("NFD", text)))


def _map_homoglyphs(text: str) -> str:
    """Map look-alikes in a word that mixes them with Latin letters ("іgnоrе"), and in a word
    made of nothing else when the text is mostly Latin ("ВОМВ" in English); Russian or Greek
    prose keeps its letters so the rules in those languages still match."""
    if text.isascii():
        return text
    mostly_latin = len(_ASCII_LETTER.findall(text)) >= len(_NON_LATIN_LETTER.findall(text))

    def fix(match: re.Match[str]) -> str:
        word = match.group()
        if _ASCII_LETTER.search(word) or (mostly_latin and not _OTHER_LETTER.search(word)):
            return word.translate(_HOMOGLYPHS)
        return word

    return _TOKEN_WITH_HOMOGLYPH.sub(fix, text)


def _join_spaced(text: str) -> str:
    return _SPACED.sub(lambda m: _SEPARATORS.sub("", m.group()), text)


def _unleet_word(match: re.Match[str]) -> str:
    word = match.group()
    if word.strip(_PUNCTUATION) in _TECH_WORDS:
        return word
    # Twice, so a leet character next to another one that became a letter is mapped too
    # ("r00t": the second 0 touches the first only once that is an "o").
    for _ in range(2):
        word = _LEET.sub(lambda m: _LEET_MAP[m.group()], word)
    return word


def _unleet(text: str) -> str:
    return _LEET_WORD.sub(_unleet_word, text)


def _fix_scrambled(text: str) -> str:
    def fix(match: re.Match[str]) -> str:
        word = match.group()
        return _TYPO_KEYS.get((word[0], word[-1], "".join(sorted(word[1:-1]))), word)

    return _TYPO_CANDIDATE.sub(fix, text)


@functools.lru_cache(maxsize=512)
def _unmask_word(word: str) -> str:
    if len(word) < 3 or not any(ch.isalpha() for ch in word):
        return word
    pattern = re.sub(
        r"[*#]+|[^*#]+",
        lambda m: (
            f".{{{len(m.group())},{len(m.group()) + 1}}}"
            if m.group()[0] in "*#"
            else re.escape(m.group())
        ),
        word,
    )
    found = {w for w in _MASK_WORDS if re.fullmatch(pattern, w)}
    return found.pop() if len(found) == 1 else word


def _unmask(text: str) -> str:
    if "*" not in text and "#" not in text:
        return text
    seen = 0

    def fix(match: re.Match[str]) -> str:
        nonlocal seen
        seen += 1
        return _unmask_word(match.group()) if seen <= MAX_MASKED else match.group()

    return _MASKED.sub(fix, text)


def normalize(text: str, *, head: int = HEAD_CHARS, tail: int = TAIL_CHARS) -> str:
    """The normalised form of (the screened part of) `text`, the one the rules match."""
    text = _strip_invisible(cap(text, head, tail))
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _strip_invisible(text)  # NFKC may compose new format characters; cheap to redo
    text = _drop_latin_diacritics(text)
    text = _map_homoglyphs(text)
    text = _join_spaced(text)  # before collapsing whitespace: "k i l l  t h e m" is two words
    text = _WHITESPACE.sub(" ", text)
    text = _unleet(text)
    text = _SQUEEZE.sub(r"\1", text)
    text = _unmask(text)
    text = _fix_scrambled(text)
    return text.strip()


def plain(text: str, *, head: int = HEAD_CHARS, tail: int = TAIL_CHARS) -> str:
    """The steps of `normalize` that every text goes through (NFKC, casefold, invisible
    characters, Latin diacritics, whitespace): where `normalize` gives something else, the
    text was obfuscated (leetspeak, spacing, look-alikes, masks)."""
    text = _strip_invisible(cap(text, head, tail))
    text = _strip_invisible(unicodedata.normalize("NFKC", text).casefold())
    return _WHITESPACE.sub(" ", _drop_latin_diacritics(text)).strip()


# --- payloads hidden in an encoding ------------------------------------------------------------

_BASE64_BLOB = re.compile(r"[A-Za-z0-9+/\-_]{16,}={0,2}")
_ROT13_HINT = re.compile(r"\brot[ -]?13\b")
MAX_PAYLOADS = 4
MAX_PAYLOAD_CHARS = 4096


def _printable(decoded: str) -> bool:
    if " " not in decoded:
        return False
    good = sum(ch.isprintable() or ch.isspace() for ch in decoded)
    return good >= 0.9 * len(decoded)


def encoded_payloads(raw: str, normalized: str) -> list[tuple[str, str]]:
    """Text hidden in an encoding, decoded, as (encoding, text) pairs for the rules to see:
    base64 runs that decode to readable text with spaces (at most `MAX_PAYLOADS`, each at most
    `MAX_PAYLOAD_CHARS`), and the rot13 of the whole text when the text mentions rot13."""
    payloads: list[tuple[str, str]] = []
    for match in _BASE64_BLOB.finditer(cap(raw)):
        if len(payloads) >= MAX_PAYLOADS:
            break
        blob = match.group()[:MAX_PAYLOAD_CHARS].rstrip("=")
        padded = blob + "=" * (-len(blob) % 4)
        try:
            if "-" in blob or "_" in blob:
                data = base64.urlsafe_b64decode(padded)
            else:
                data = base64.b64decode(padded, validate=True)
        except (binascii.Error, ValueError):
            continue
        decoded = data.decode("utf-8", errors="replace")
        if _printable(decoded):
            payloads.append(("base64", decoded))
    if _ROT13_HINT.search(normalized):
        payloads.append(("rot13", codecs.encode(normalized, "rot13")))
    return payloads

"""Semantic cache rules, pure text: `normalise_query` (the spellings of one question that
share an entry exactly) and its digest, the `skip_reason`/`cacheable` rules (only a question
whose answer depends on nothing but its words is shared), and `conflicting` (cheap guards
against what MiniLM confuses: swapped words, other numbers, a negation).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Any

MAX_QUERY_CHARS = 300


_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def _is_edge(ch: str) -> bool:
    return ch.isspace() or unicodedata.category(ch).startswith("P")


def normalise_query(text: str) -> str:
    """NFKC, curly quotes made straight, case-folded, whitespace collapsed, punctuation cut
    from both ends: the spellings of one question that should share an entry exactly."""
    text = " ".join(unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold().split())
    start, end = 0, len(text)
    while start < end and _is_edge(text[start]):
        start += 1
    while end > start and _is_edge(text[end - 1]):
        end -= 1
    return text[start:end]


def query_digest(normalised: str) -> str:
    """The exact-match key of a normalised query (sha256 hex, first 32 digits)."""
    return hashlib.sha256(normalised.encode("utf-8", "surrogatepass")).hexdigest()[:32]


_TIME_SENSITIVE = re.compile(
    r"\b(today|tonight|tomorrow|yesterday|now|current(ly)?|latest|recent(ly)?|news|weather"
    r"|this (week|month|year)|what time|what day|what date)\b"
)


def skip_reason(
    text: str,
    *,
    history_messages: int = 0,
    media_parts: int = 0,
    retrieved_passages: int = 0,
    has_profile: bool = False,
    flagged: bool = False,
    max_chars: int = MAX_QUERY_CHARS,
) -> str | None:
    """Why a turn must not use (or fill) the cache; None when it may. Only a question whose
    answer depends on nothing but its words is shared: no history, media, retrieved passages
    or user profile in the prompt, not flagged by safety, short, and not about "now"."""
    normalised = normalise_query(text)
    if flagged:
        return "flagged"
    if not normalised:
        return "empty"
    if history_messages > 0:
        return "history"
    if media_parts > 0:
        return "media"
    if retrieved_passages > 0:
        return "retrieval"
    if has_profile:
        return "profile"
    if len(normalised) > max_chars:
        return "too_long"
    if _TIME_SENSITIVE.search(normalised):
        return "time_sensitive"
    return None


def cacheable(text: str, **context: Any) -> bool:
    """`skip_reason(text, **context) is None`."""
    return skip_reason(text, **context) is None


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_OPERATOR = re.compile("[+*/=%^\u00d7\u00f7<>#$\u20ac\u00a3@&]")
_NEGATIONS = frozenset(
    {"not", "no", "never", "nor", "none", "nothing", "nobody", "cannot", "without"}
)


def _negated(words: list[str]) -> bool:
    return any(w in _NEGATIONS or w.endswith("n't") for w in words)


def conflicting(a: str, b: str) -> bool:
    """Two normalised queries that must not share an answer however close their embeddings:
    other numbers or operators ("2+2" / "2*3"), one negated, or the same words in another
    order ("5 km to miles" / "5 miles to km", where MiniLM scores 0.99)."""
    if _NUMBER.findall(a) != _NUMBER.findall(b) or _OPERATOR.findall(a) != _OPERATOR.findall(b):
        return True
    words_a, words_b = _WORD.findall(a), _WORD.findall(b)
    if _negated(words_a) != _negated(words_b):
        return True
    return words_a != words_b and sorted(words_a) == sorted(words_b)

"""Cutting a streamed answer into short pieces for text-to-speech, as it streams (pure).

Why: a TTS engine speaks a piece only once it has the whole piece, so waiting for the whole
answer (or even a whole paragraph) before synthesizing adds seconds before the user hears
anything. Very short pieces start sooner but sound bad: the engine intonates each piece as
a unit, so a cut in the middle of a clause gives a robotic pause, and a cut inside "3.14",
"Dr. Smith" or a URL is read as two sentences ("three." "fourteen"). So the segmenter cuts
as early as it may (`min_chars`) but only where a speaker would pause anyway.

Rules, as implemented (positions count characters of the pending text, not bytes):

- Boundaries, strongest first: a sentence end (``. ! ? …`` and CJK ``。！？``), clause
  punctuation (``, ; : — –`` and CJK ``，、；：``), a newline. Closing quotes and brackets
  right after the punctuation belong to it (``He said "Hi." Then`` is cut after the quote).
- Western punctuation (everything above but the CJK marks) is a boundary only when followed
  by whitespace (or by the end of the answer, at `flush`): "3.14", "1,000,000", "10:30",
  "v1.2.3", ".5", "https://example.com/a.b?x=1,2", "www.example.org" and "bob@example.com"
  have no whitespace after their inner punctuation, so they are never cut inside. A period
  after a URL, an email or a number and followed by a space ("see www.example.org. Then")
  is a sentence end: the period is not part of the address.
- CJK punctuation needs no space after it (CJK text has none); in a run of marks ("？！")
  the last one decides.
- A period is not a sentence end after: a known abbreviation (case-insensitive: Mr, Mrs, Ms,
  Dr, Prof, Sr, Jr, St, Mt, vs, Fig, approx, dept, cf, al, Ph.D), a single letter
  ("J. Smith"; so "Plan B. Then" is not cut either), letters joined by periods ("e.g.",
  "i.e.", "U.S.", "a.m.", "p.m."; so "at 10 a.m. Then" is not cut), "No." when the next word
  starts with a digit ("No. 5"), a number that opens a line ("1. First step", an ordered
  list). "etc." is a sentence end only when the next word starts with a capital letter
  ("apples, etc. Then" is cut, "apples, etc. and pears" is not). An ellipsis ("...") is a
  sentence end.
- The first boundary whose text (without the whitespace after it) is at least `min_chars`
  long wins. A newline counts from `min_chars` too, whatever comes before it. Past
  `max_chars`, weaker boundaries count as well: closing brackets or quotes followed by
  whitespace (or a CJK closing bracket), and a dash between spaces (``word - word``).
- A piece with no boundary up to `hard_max_chars` is cut after the last whitespace at or
  before `hard_max_chars` (and not before `min_chars`), or, if there is none, hard at
  `hard_max_chars` (a long URL, a run of CJK text without punctuation).
- The whitespace after a cut belongs to the piece that ends there, so every piece after the
  first starts with a non-space character. A piece's text without that whitespace is at
  most `hard_max_chars` long, and at least `min_chars` long except for the final piece (and
  for a piece whose whitespace run starts before `min_chars` and goes on past
  `hard_max_chars`: a run is never split).
- Concatenating the pieces' texts gives back the answer exactly: nothing dropped, nothing
  added (whitespace included). A whitespace-only answer gives one whitespace-only piece at
  `flush`; callers skip pieces with nothing to say (``not segment.text.strip()``).

Determinism: the pieces depend only on the answer's text, never on how the stream split it
(whole, character by character, a token cut in "3." and "14"). A boundary is decided only
once the characters it depends on have arrived: after western punctuation the next
character (and past the whitespace the next word, for "etc."/"No."); after any boundary the
end of the whitespace run that follows it. This costs at most one token of latency.
Looking back (the word before a period) never reaches outside the pending text.

One `TextSegmenter` serves one answer: `flush` ends it, and `feed` after `flush` raises.
"""

# ruff: noqa: RUF001, RUF002, RUF003  (CJK and typographic punctuation are this module's subject)

from __future__ import annotations

import re
from dataclasses import dataclass

_SENTENCE = frozenset(".!?…")
_CLAUSE = frozenset(",;:—–")
_CJK_PUNCT = frozenset("。！？，、；：")
_CLOSERS = frozenset(")]}\"'”’»」』）】》〉")
_CJK_CLOSERS = frozenset("」』）】》〉")
_WEAK_CLOSERS = _CLOSERS - {"'", "’"}  # an apostrophe ("users' data") is no pause
_OPENERS = "([{\"'“‘«「『（【《〈"
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "fig", "approx", "dept"}
    | {"cf", "al", "ph.d"}
)
_LETTERS_AND_PERIODS = re.compile(r"(?:[^\W\d_]\.)*[^\W\d_]")  # "J", "e.g", "U.S", "a.m"

_REJECT = -1  # a candidate that is not a boundary (cuts are always > 0)


@dataclass(frozen=True, slots=True)
class SegmenterConfig:
    min_chars: int = 10  # never cut before this many characters (unless flushing)
    max_chars: int = 20  # past this many, weaker boundaries (brackets, spaced dashes) count
    hard_max_chars: int = 120  # with no boundary at all, cut at the last space before this
    # the first piece's `hard_max_chars` (None: the same): a smaller one gets the first audio
    # out sooner when the answer opens with a long clause, at a small cost in prosody
    first_hard_max_chars: int | None = None

    def __post_init__(self) -> None:
        first = self.first_hard_max_chars
        if first is not None and not self.min_chars <= first <= self.hard_max_chars:
            raise ValueError(
                "SegmenterConfig needs min_chars <= first_hard_max_chars <= hard_max_chars, "
                f"got first_hard_max_chars={first}"
            )
        if not 1 <= self.min_chars <= self.max_chars <= self.hard_max_chars:
            raise ValueError(
                "SegmenterConfig needs 1 <= min_chars <= max_chars <= hard_max_chars, got "
                f"min_chars={self.min_chars}, max_chars={self.max_chars}, "
                f"hard_max_chars={self.hard_max_chars}"
            )


DEFAULT_CONFIG = SegmenterConfig()


@dataclass(frozen=True, slots=True)
class TextSegment:
    index: int  # 0, 1, 2 ... in order
    text: str  # exactly these characters of the answer, trailing whitespace included
    char_start: int  # offset of text in the whole answer
    char_end: int  # char_start + len(text)


class TextSegmenter:
    """Feed it the answer's text as it streams; it returns the pieces that became final."""

    def __init__(self, config: SegmenterConfig = DEFAULT_CONFIG) -> None:
        self._config = config
        self._buf = ""  # fed, not yet in a segment
        self._offset = 0  # of _buf in the whole answer
        self._index = 0
        self._scan = config.min_chars - 1  # candidates of _buf before this are rejected
        self._line_start = True  # _buf starts a line (the answer's start, after a newline)
        self._flushed = False

    @property
    def config(self) -> SegmenterConfig:
        return self._config

    @property
    def pending(self) -> str:
        """Text fed but not yet in a segment."""
        return self._buf

    def feed(self, text: str) -> list[TextSegment]:
        """Append streamed text (split anywhere, even mid-word or mid-number); return the
        segments that became complete."""
        if self._flushed:
            raise RuntimeError("TextSegmenter.feed after flush: use a new one per answer")
        if not text:
            return []
        self._buf += text
        return self._drain(final=False)

    def flush(self) -> list[TextSegment]:
        """The answer ended: the segments left, the last one whatever its length (none if
        nothing is pending). Calling it again returns nothing."""
        if self._flushed:
            return []
        self._flushed = True
        segments = self._drain(final=True)
        if self._buf:
            segments.append(self._emit(len(self._buf)))
        return segments

    def _drain(self, *, final: bool) -> list[TextSegment]:
        segments = []
        while self._buf:
            cut = self._find_cut(final)
            if cut is None:
                break
            segments.append(self._emit(cut))
        return segments

    def _emit(self, cut: int) -> TextSegment:
        text, self._buf = self._buf[:cut], self._buf[cut:]
        segment = TextSegment(self._index, text, self._offset, self._offset + cut)
        self._index += 1
        self._offset += cut
        self._line_start = "\n" in text[len(text.rstrip()) :]
        self._scan = self._config.min_chars - 1
        return segment

    @property
    def _hard_max(self) -> int:
        first = self._config.first_hard_max_chars
        if self._index == 0 and first is not None:
            return first
        return self._config.hard_max_chars

    def _find_cut(self, final: bool) -> int | None:
        """Where the next segment ends in the pending text; None while that is not known yet
        (or, when final, if no boundary: the caller takes the rest)."""
        p, hard = self._buf, self._hard_max
        i = self._scan
        while i < min(len(p), hard):
            verdict = self._candidate(p, i, final)
            if verdict is None:
                self._scan = i
                return None
            if verdict != _REJECT:
                return verdict
            i += 1
        self._scan = i
        if len(p) > hard:
            return self._hard_cut(p, final)
        return None

    def _candidate(self, p: str, i: int, final: bool) -> int | None:
        """The cut if a boundary starts at p[i], _REJECT if none does, None if it depends on
        text that has not arrived."""
        c = p[i]
        if c == "\n":
            start = i  # the whitespace run holding the newline: the text ends before it
            while start > 0 and p[start - 1].isspace():
                start -= 1
            if not self._config.min_chars <= start <= self._hard_max:
                return _REJECT
            return _ws_end(p, i, final)
        if c in _SENTENCE or c in _CLAUSE or c in _CJK_PUNCT:
            return self._punctuation(p, i, final)
        if c in _WEAK_CLOSERS and (i == 0 or p[i - 1] not in _CLOSERS):
            end = _closers_end(p, i, final)
            if end is None:
                return None
            return self._weak(p, end, final, need_space=p[end - 1] not in _CJK_CLOSERS)
        if c == "-" and i >= 2 and p[i - 1] in " \t" and not p[i - 2].isspace():
            if i + 1 == len(p) and not final:
                return None
            return self._weak(p, i + 1, final, need_space=True)
        return _REJECT

    def _punctuation(self, p: str, i: int, final: bool) -> int | None:
        end = _closers_end(p, i + 1, final)
        if end is None:
            return None
        if p[i] not in _CJK_PUNCT:
            if end < len(p) and not p[end].isspace():
                return _REJECT  # "3.14", "1,000", "a.b", "?!": not (yet) a pause
        elif end < len(p) and (p[end] in _CJK_PUNCT or p[end] in _SENTENCE):
            return _REJECT  # "？！", "。…": the run's last mark decides
        if not self._config.min_chars <= end <= self._hard_max:
            return _REJECT
        cut = _ws_end(p, end, final)
        if cut is None:
            return None
        if p[i] == "." and not self._sentence_period(p, i, p[cut] if cut < len(p) else ""):
            return _REJECT
        return cut

    def _weak(self, p: str, end: int, final: bool, *, need_space: bool) -> int | None:
        if not self._config.max_chars <= end <= self._hard_max:
            return _REJECT
        if need_space and end < len(p) and not p[end].isspace():
            return _REJECT
        return _ws_end(p, end, final)

    def _sentence_period(self, p: str, i: int, next_char: str) -> bool:
        """Whether the period p[i] (followed by whitespace, then next_char, "" at the end)
        ends a sentence rather than an abbreviation or a list number."""
        if i > 0 and p[i - 1] == ".":
            return True  # an ellipsis "..."
        start = i
        while start > 0 and not p[start - 1].isspace():
            start -= 1
        word = p[start:i].lstrip(_OPENERS)
        lower = word.lower()
        if not word:
            return True
        if lower == "etc":
            return not next_char or next_char.isupper()
        if lower == "no":
            return not next_char.isdigit()
        if lower in _ABBREVIATIONS or _LETTERS_AND_PERIODS.fullmatch(word):
            return False
        return not (word.isdecimal() and self._opens_line(p, start))

    def _opens_line(self, p: str, start: int) -> bool:
        newline = p.rfind("\n", 0, start)
        if newline < 0:
            return self._line_start and not p[:start].strip()
        return not p[newline + 1 : start].strip()

    def _hard_cut(self, p: str, final: bool) -> int | None:
        """No boundary up to hard_max_chars (and p is longer): cut after the last whitespace
        that leaves at least min_chars before it, else at hard_max_chars."""
        low, hard = self._config.min_chars, self._hard_max
        for j in range(hard, low - 1, -1):
            if p[j].isspace():
                start = j
                while start > 0 and p[start - 1].isspace():
                    start -= 1
                if start >= low or j == hard:  # j == hard: never start a piece with spaces
                    return _ws_end(p, j, final)
                break
        return hard


def _closers_end(p: str, j: int, final: bool) -> int | None:
    """The end of the closing quotes/brackets starting at p[j]; None if more may follow."""
    while j < len(p) and p[j] in _CLOSERS:
        j += 1
    if j == len(p) and not final:
        return None
    return j


def _ws_end(p: str, j: int, final: bool) -> int | None:
    """The end of the whitespace starting at p[j]; None if more may follow."""
    while j < len(p) and p[j].isspace():
        j += 1
    if j == len(p) and not final:
        return None
    return j

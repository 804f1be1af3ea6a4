"""Which text of an answer the user has heard, from how far its audio played (pure).

Each `response.audio` frame speaks a known piece of the answer for a known time, so a
playback position (`audio_end_ms`, reported by the client or estimated by the edge) maps
back to text: whole pieces before it, and of the piece playing then the words whose share
of its time had passed. A word cut in half counts as not heard, so the history never keeps
a fragment the user did not hear whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROUNDING_MS = 1.0  # clients report whole or rounded milliseconds: the end of a piece is reached


@dataclass(frozen=True, slots=True)
class _Piece:
    text: str
    start_ms: float
    duration_ms: float


@dataclass(slots=True)
class AudioTimeline:
    _pieces: list[_Piece] = field(default_factory=list)
    total_ms: float = 0.0

    def add(self, text: str, duration_ms: float) -> None:
        """The next piece sent to the client (pieces play back to back, in order)."""
        self._pieces.append(_Piece(text, self.total_ms, duration_ms))
        self.total_ms += duration_ms

    def heard(self, audio_end_ms: float) -> str:
        """The answer's text heard when playback stopped at `audio_end_ms`."""
        out: list[str] = []
        for piece in self._pieces:
            end = piece.start_ms + piece.duration_ms
            if audio_end_ms >= end - ROUNDING_MS:
                out.append(piece.text)
                continue
            if audio_end_ms > piece.start_ms and piece.duration_ms > 0:
                share = (audio_end_ms - piece.start_ms) / piece.duration_ms
                out.append(_whole_words(piece.text, int(len(piece.text) * share)))
            break
        return "".join(out)


def _whole_words(text: str, chars: int) -> str:
    """The first `chars` characters of `text`, less a word left unfinished at the cut."""
    if chars >= len(text):
        return text
    if chars <= 0:
        return ""
    if text[chars].isspace() or text[chars - 1].isspace():
        return text[:chars]
    cut = text.rfind(" ", 0, chars)
    if cut >= 0:
        return text[: cut + 1]
    # no space before the cut: a script without spaces (CJK) keeps characters; a lone word
    # cut in half is not heard
    return text[:chars] if not text[:chars].isascii() else ""

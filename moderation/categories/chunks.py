"""Long texts in pieces the encoders read well: a sentence encoder averages over its input,
so one harmful sentence inside a long paste would be diluted; each piece is scored and the
worst one counts. Bounded: at most MAX_CHUNKS pieces, from the head and the tail, or
WIDE_CHUNKS where the encoder is cheap (`classifier.readings`)."""

from __future__ import annotations

CHUNK_CHARS = 400  # ~ a 50-token window and its overlap
MAX_CHUNKS = 8
# Every piece of the longest turn the edge accepts (TURNSTREAM_MAX_TURN_CHARS, 8000, cut at
# sentence ends into pieces of 200-400 characters), with room to spare.
WIDE_CHUNKS = 48


def _cut(text: str, size: int) -> int:
    """Where to end a piece of at most `size` characters: after the last sentence end or
    space in its second half, else at `size`."""
    if len(text) <= size:
        return len(text)
    for marks in (".!?\u3002\uff01\uff1f\n", " "):
        best = max(text.rfind(mark, size // 2, size) for mark in marks)
        if best > 0:
            return best + 1
    return size


def chunks(text: str, size: int = CHUNK_CHARS, limit: int = MAX_CHUNKS) -> list[str]:
    """`text` whole when short, else up to `limit` pieces (half from its start, half from
    its end, so an injection appended to a long paste is still read)."""
    text = text.strip()
    if len(text) <= size:
        return [text] if text else []
    pieces: list[str] = []
    rest = text
    while rest:
        end = _cut(rest, size)
        piece = rest[:end].strip()
        if piece:
            pieces.append(piece)
        rest = rest[end:]
    return head_and_tail(pieces, limit)


def head_and_tail(pieces: list[str], limit: int) -> list[str]:
    """At most `limit` pieces: half from the start, half from the end (an injection appended
    to a long paste is still read)."""
    if len(pieces) <= limit:
        return pieces
    return pieces[: limit - limit // 2] + pieces[-(limit // 2) :]


FRAGMENT_CHARS = (60, 160)  # ~50 tokens of a byte-level tokenizer on Devanagari .. on English


def fragments(text: str, sizes: tuple[int, ...] = FRAGMENT_CHARS) -> list[str]:
    """Consecutive pieces of `text` of about each size in `sizes`, as a streamed answer's
    windows would cut it (training only: a safe answer is safe in every window, and its
    windows look unlike whole texts)."""
    out: list[str] = []
    for size in sizes:
        if len(text) <= size * 1.5:
            continue
        out += chunks(text, size=size, limit=10_000)
    return out

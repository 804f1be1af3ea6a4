"""Cutting a streamed answer into overlapping windows for the incremental output check.

The inference worker pushes each text delta with its token count as it streams; every
`size` tokens (default 50) a `Window` comes out holding the new text plus the text of the
last `overlap` tokens (default 10) of what came before, so a phrase split across two windows
is seen whole by one of them. Token boundaries are the deltas' boundaries: with one token per
delta (how engines stream) the overlap is exactly `overlap` tokens; a delta of several tokens
is kept whole, so the overlap may be a little longer. The first window may be shorter
(`first_size`): with hold-back, nothing shows before the first verdict, so a short first
window buys a fast first visible text; later windows are the full size, so the number of
checks (and the classifier's context) per answer stays about the same.

Bounds: a window's new text is at most `max_chars` characters (a huge single token is split
into several windows) and its overlap at most `max_overlap_chars`, so a window's size and the
memory kept here are bounded whatever the engine emits. Offsets are absolute character
offsets in the answer: `[new_start, end_char)` is the text this window releases or cuts.
Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Window:
    index: int
    start_char: int  # where `text` starts (the overlap included)
    end_char: int  # one past its last character
    text: str
    final: bool
    new_start: int  # where the text no earlier window held starts (start_char <= new_start)
    tokens: int  # tokens new in this window


class Windower:
    """Accumulates deltas; `push` returns the windows that became complete, `finish` the
    last partial one (None when every character was already in a window)."""

    def __init__(
        self,
        size: int = 50,
        overlap: int = 10,
        *,
        first_size: int | None = None,
        max_chars: int = 4096,
        max_overlap_chars: int = 512,
    ) -> None:
        if size < 1 or not 0 <= overlap < size:
            raise ValueError("need size >= 1 and 0 <= overlap < size")
        if first_size is not None and not 1 <= first_size <= size:
            raise ValueError("need 1 <= first_size <= size")
        if max_chars < 1 or max_overlap_chars < 0:
            raise ValueError("need max_chars >= 1 and max_overlap_chars >= 0")
        self.size = size
        self.first_size = size if first_size is None else first_size
        self.overlap = overlap
        self.max_chars = max_chars
        self.max_overlap_chars = max_overlap_chars
        self._buffer = ""  # the answer's text from `_buffer_start` on
        self._buffer_start = 0
        self._end = 0
        self._pending_start = 0
        self._pending_tokens = 0
        self._pieces: deque[tuple[int, int, int]] = deque()  # (start, end, tokens)
        self._index = 0
        self._finished = False

    @property
    def chars(self) -> int:
        """Characters pushed so far."""
        return self._end

    def _full(self) -> bool:
        """The pending text has enough tokens for a window (fewer for the first one)."""
        return self._pending_tokens >= (self.first_size if self._index == 0 else self.size)

    def push(self, text: str, tokens: int = 1) -> list[Window]:
        if self._finished:
            raise RuntimeError("push after finish")
        if tokens < 0:
            raise ValueError("tokens must be >= 0")
        windows: list[Window] = []
        if not text:
            self._pending_tokens += tokens
            if self._full() and self._end > self._pending_start:
                windows.append(self._emit(final=False))
            return windows
        left_tokens, left_chars, offset = tokens, len(text), 0
        while offset < len(text):
            room = self.max_chars - (self._end - self._pending_start)
            chunk = text[offset : offset + room]
            # A delta split by `max_chars` spreads its tokens over its chunks by length.
            share = left_tokens if len(chunk) == left_chars else tokens * len(chunk) // len(text)
            share = min(share, left_tokens)
            left_tokens -= share
            left_chars -= len(chunk)
            offset += len(chunk)
            self._append(chunk, share)
            if self._full() or self._end - self._pending_start >= self.max_chars:
                windows.append(self._emit(final=False))
        return windows

    def finish(self) -> Window | None:
        if self._finished:
            raise RuntimeError("finish called twice")
        self._finished = True
        if self._end == self._pending_start:
            return None
        return self._emit(final=True)

    def _append(self, chunk: str, tokens: int) -> None:
        self._pieces.append((self._end, self._end + len(chunk), tokens))
        self._buffer += chunk
        self._end += len(chunk)
        self._pending_tokens += tokens

    def _overlap_start(self) -> int:
        """Start of the last `overlap` tokens before the pending text (char-bounded)."""
        if self.overlap == 0 or self.max_overlap_chars == 0:
            return self._pending_start
        start, tokens = self._pending_start, 0
        for piece_start, piece_end, piece_tokens in reversed(self._pieces):
            if piece_end > self._pending_start:
                continue
            start = piece_start
            tokens += piece_tokens
            if tokens >= self.overlap or self._pending_start - start >= self.max_overlap_chars:
                break
        return max(start, self._pending_start - self.max_overlap_chars)

    def _emit(self, *, final: bool) -> Window:
        start = self._overlap_start()
        window = Window(
            index=self._index,
            start_char=start,
            end_char=self._end,
            text=self._buffer[start - self._buffer_start :],
            final=final,
            new_start=self._pending_start,
            tokens=self._pending_tokens,
        )
        self._index += 1
        self._pending_start = self._end
        self._pending_tokens = 0
        self._trim()
        return window

    def _trim(self) -> None:
        """Drop pieces and text the next window's overlap cannot reach."""
        keep_from, tokens, kept = self._end, 0, 0
        if self.overlap > 0:
            for piece_start, _, piece_tokens in reversed(self._pieces):
                if tokens >= self.overlap or self._end - keep_from >= self.max_overlap_chars:
                    break
                keep_from, tokens, kept = piece_start, tokens + piece_tokens, kept + 1
        while len(self._pieces) > kept:
            self._pieces.popleft()
        self._buffer = self._buffer[keep_from - self._buffer_start :]
        self._buffer_start = keep_from

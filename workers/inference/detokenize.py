"""Token ids to streamed text, a few tokens at a time, without breaking characters (pure).

Decoding each new token on its own is wrong twice over: byte-level vocabularies split one
character (é, 日, an emoji) over several tokens, each of which decodes to U+FFFD alone, and
SentencePiece-style decoders drop or add a leading space depending on what precedes a token.
So, like vLLM's and TGI's detokenizers, this decodes a short window of recent tokens twice
(with and without the new ones) and emits the difference, holding text back while it ends
in an incomplete character. Cost per step is the window, not the whole answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

REPLACEMENT = "\ufffd"  # what a decoder yields for the bytes of an unfinished character


class IncrementalDetokenizer:
    """`decode(ids)` is the tokenizer's decode (special tokens skipped, as the answer
    shows). `push` returns the new text, `flush` what was held back at the end."""

    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode
        self._tokens: list[int] = []
        self._prefix_offset = 0  # start of the window decoded for context
        self._read_offset = 0  # tokens before this are emitted as text

    def push(self, new_ids: Sequence[int]) -> str:
        if not new_ids:
            return ""
        self._tokens.extend(new_ids)
        before = self._decode(self._tokens[self._prefix_offset : self._read_offset])
        after = self._decode(self._tokens[self._prefix_offset :])
        if len(after) <= len(before) or after.endswith(REPLACEMENT):
            return ""  # nothing visible yet, or a character still incomplete
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._tokens)
        return after[len(before) :]

    def flush(self) -> str:
        """Text still held back (an answer that ended mid-character keeps its U+FFFD)."""
        if self._read_offset == len(self._tokens):
            return ""
        before = self._decode(self._tokens[self._prefix_offset : self._read_offset])
        after = self._decode(self._tokens[self._prefix_offset :])
        self._prefix_offset = self._read_offset = len(self._tokens)
        return after[len(before) :]

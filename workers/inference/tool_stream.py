"""Which pieces of a streamed answer are tool calls (pure).

The client sees an answer's text as `response.delta` and a call's text as
`response.tool_call.delta`, as it is generated. In `auto` mode a call starts at
`<tool_call>` and ends at `</tool_call>` (the tags are not shown); a tag split across two
deltas is held back until it is whole. When the whole answer is one call (`required`,
`named`) every piece is call 0.
"""

from __future__ import annotations

from schemas.tools import CALL_CLOSE, CALL_OPEN

TEXT = -1  # the index of a piece that is plain answer text


class CallSplitter:
    def __init__(self, *, whole: bool) -> None:
        self._whole = whole
        self._calls = 0
        self._inside = False
        self._held = ""

    def push(self, text: str) -> list[tuple[int, str]]:
        """(call index or TEXT, text) pieces ready to show, in order."""
        if self._whole:
            return [(0, text)] if text else []
        out: list[tuple[int, str]] = []
        rest = self._held + text
        self._held = ""
        while rest:
            tag = CALL_CLOSE if self._inside else CALL_OPEN
            at = rest.find(tag)
            if at >= 0:
                self._emit(out, rest[:at])
                rest = rest[at + len(tag) :]
                if self._inside:
                    self._calls += 1
                self._inside = not self._inside
                continue
            keep = _partial_suffix(rest, tag)
            self._emit(out, rest[: len(rest) - keep])
            self._held = rest[len(rest) - keep :]
            break
        return out

    def flush(self) -> list[tuple[int, str]]:
        """What was held back at the end (an unfinished tag is shown as it is)."""
        out: list[tuple[int, str]] = []
        self._emit(out, self._held)
        self._held = ""
        return out

    def _emit(self, out: list[tuple[int, str]], text: str) -> None:
        if text:
            out.append((self._calls if self._inside else TEXT, text))


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a beginning of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0

"""A cached answer, streamed the way an engine streams: a delta per word, the last one
finished with `stop`. The turn then travels the normal path (relay, output safety check,
outcome, trace), so a client cannot tell a cache hit from an answer except by its speed
and its trace (`cache_hit`)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from schemas.events import FinishReason
from workers.inference.engines.engine import GenerationDelta

_PIECES = re.compile(r"\s*\S+")


async def replay(text: str) -> AsyncIterator[GenerationDelta]:
    pieces = _PIECES.findall(text) or [text]
    pieces[-1] += text[len("".join(pieces)) :]  # trailing whitespace stays with the last
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        yield GenerationDelta(piece, 1, 0, 0, FinishReason.STOP if last else None)

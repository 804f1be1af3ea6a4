"""A cached answer streams like an engine's: word by word, whole, ending in stop."""

from __future__ import annotations

from schemas.events import FinishReason
from workers.inference.replay import replay


async def test_the_pieces_make_the_answer_and_only_the_last_one_finishes():
    text = "  Paris is the capital\nof France.  "
    deltas = [d async for d in replay(text)]
    assert "".join(d.text for d in deltas) == text
    assert [d.finish_reason for d in deltas][-1] == FinishReason.STOP
    assert all(d.finish_reason is None for d in deltas[:-1]) and len(deltas) == 6


async def test_an_answer_without_words_is_one_piece():
    assert [d.text async for d in replay("   ")] == ["   "]

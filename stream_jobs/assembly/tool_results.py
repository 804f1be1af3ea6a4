"""Tool results checked against the calls they answer (pure).

A result may only answer a call of the conversation's latest answer: one for a call of an
older answer (the user moved on, regenerated, or a slow client sent it late) would splice a
stale fact into a newer turn, so the turn is refused instead (`stale_tool_result`). A client
that carries its own history (HTTP, stateless) owns that check: the server has nothing to
hold the result against.
"""

from __future__ import annotations

from schemas.events import ErrorInfo, ToolResult

STALE = "stale_tool_result"


def stale_error(results: list[ToolResult], open_calls: dict[str, str]) -> ErrorInfo | None:
    """Why these results cannot be taken (None: each answers a call still open)."""
    stale = [r.call_id for r in results if r.call_id not in open_calls]
    if not stale:
        return None
    listed = ", ".join(stale)
    expected = ", ".join(open_calls) or "none"
    return ErrorInfo(
        STALE,
        f"tool results for {listed} answer no call of the conversation's latest answer "
        f"(its open calls: {expected}); results are taken only for the calls just made",
        retryable=False,
    )


def named(results: list[ToolResult], open_calls: dict[str, str]) -> list[ToolResult]:
    """The results with the names of the tools whose calls they answer."""
    return [
        r
        if r.name or r.call_id not in open_calls
        else ToolResult(r.call_id, r.output, open_calls[r.call_id])
        for r in results
    ]

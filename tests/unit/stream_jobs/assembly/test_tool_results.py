"""Tool results are taken only for the calls the latest answer made."""

from __future__ import annotations

from harness.factories import completed, enriched
from schemas.events import FinishReason, ToolCall, ToolResult
from stream_jobs.assembly.state import ConversationState, HistoryLimits, on_completed, on_enriched
from stream_jobs.assembly.tool_results import STALE, named, stale_error


def answer(state: ConversationState, turn_id: str, calls: list[ToolCall], **fields) -> None:
    on_enriched(state, enriched(turn_id), now_ms=0, max_held=8)
    done = completed(turn_id, tool_calls=calls, **fields)
    on_completed(state, done, user_text="q", count_tokens=len, limits=HistoryLimits(), now_ms=0)


def test_only_the_latest_answers_calls_are_open():
    state = ConversationState()
    answer(
        state, "t1", [ToolCall("c1", "get_weather", "{}")], finish_reason=FinishReason.TOOL_CALLS
    )
    assert state.open_calls == {"c1": "get_weather"}
    assert stale_error([ToolResult("c1", "sunny")], state.open_calls) is None
    answer(state, "t2", [])  # the user moved on: the old call closes
    error = stale_error([ToolResult("c1", "sunny")], state.open_calls)
    assert error is not None and error.code == STALE and "c1" in error.message
    answer(state, "t3", [ToolCall("c3", "add", "{}")], finish_reason=FinishReason.TOOL_CALLS)
    answer(state, "t4", [], finish_reason=FinishReason.ERROR)  # a failed turn changes nothing
    assert state.open_calls == {"c3": "add"}


def test_results_are_named_after_their_calls():
    results = named([ToolResult("c3", "5"), ToolResult("zz", "?")], {"c3": "add"})
    assert [(r.call_id, r.name) for r in results] == [("c3", "add"), ("zz", "")]

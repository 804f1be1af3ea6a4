"""The trace row of a turn, folded from its events (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.factories import completed, submitted
from schemas.events import (
    DecodingParams,
    ErrorInfo,
    FinishReason,
    MediaKind,
    MediaRef,
    OutputFormat,
    PromptContext,
    ResponseFormat,
    Timings,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    ToolResult,
    ToolSpec,
    Usage,
)
from schemas.traces import TRACE_COLUMNS, Prices, build_trace, latency_hops


def test_a_completed_multimodal_turn():
    turn = submitted(
        "t1",
        text="what is this?",
        client="ua/1",
        media=[MediaRef(kind=MediaKind.IMAGE, sha256="a"), MediaRef(kind=MediaKind.AUDIO)],
    )
    context = PromptContext(
        history_messages=4, dropped_messages=2, prompt_tokens=90, retrieved=["doc#1"], profile=True
    )
    done = completed(
        "t1",
        usage=Usage(100, 4, 64),
        timings=Timings(queue_ms=5, ttft_ms=30, e2e_ms=90, itl_ms=[10.0, 20.0, 30.0]),
        completed_at_ms=1090.0,
        model="smol",
    )
    prices = Prices({"smol": (1.0, 2.0)})
    row = build_trace(turn, preprocess_ms=7.5, context=context, completed=done, prices=prices)
    assert (row.status, row.model, row.client) == ("completed", "smol", "ua/1")
    assert (row.has_text, row.image_count, row.audio_count) == (1, 1, 1)
    assert (row.prompt_tokens, row.completion_tokens, row.cached_prompt_tokens) == (100, 4, 64)
    assert (row.history_messages, row.dropped_messages, row.retrieved) == (4, 2, ["doc#1"])
    assert row.profile_used == 1 and row.preprocess_ms == 7.5
    assert (row.itl_p50_ms, row.itl_p99_ms, row.itl_max_ms) == (20.0, 30.0, 30.0)
    assert row.cost_usd == pytest.approx((100 * 1.0 + 4 * 2.0) / 1e6)
    assert row.submitted_at == datetime.fromtimestamp(1.0, tz=UTC)
    assert row.completed_at == datetime.fromtimestamp(1.09, tz=UTC)
    assert len(row.values()) == len(TRACE_COLUMNS)


def test_the_language_is_the_spoken_one_else_the_typed_one_and_says_which():
    done = completed("t1", completed_at_ms=2000.0)

    def language(**known) -> tuple[str, str]:
        trace = build_trace(submitted("t1"), completed=done, **known)
        return trace.language, trace.language_source

    assert language(language="es", text_language="en") == ("es", "speech")
    assert language(text_language="fr") == ("fr", "text")
    assert language() == ("", "")


def test_the_end_of_turn_wait_runs_from_the_end_of_speech_to_acceptance():
    done = completed("t1", completed_at_ms=2000.0)
    voiced = submitted("t1", submitted_at_ms=1000.0, speech_ended_at_ms=380.0)
    assert build_trace(voiced, completed=done).hop_endpointing_ms == 620.0
    assert build_trace(submitted("t1"), completed=done).hop_endpointing_ms == 0.0  # typed
    skewed = submitted("t1", submitted_at_ms=1000.0, speech_ended_at_ms=1004.0)  # clock jitter
    assert build_trace(skewed, completed=done).hop_endpointing_ms == 0.0


def test_an_error_keeps_its_code():
    error = ErrorInfo("no_speech", "nothing said")
    row = build_trace(
        submitted("t2"), completed=completed("t2", finish_reason=FinishReason.ERROR, error=error)
    )
    assert (row.finish_reason, row.error_code) == ("error", "no_speech")
    assert row.retrieved == [] and row.history_messages == 0  # never assembled


def test_a_turn_whose_completion_never_came_is_timed_out():
    row = build_trace(submitted("t3"), closed_at_ms=61_000.0)
    assert (row.status, row.error_code, row.ttft_ms) == ("timed_out", "timed_out", None)
    assert row.e2e_ms == 60_000.0
    with pytest.raises(ValueError, match="closed_at_ms"):
        build_trace(submitted("t4"))


def test_a_turns_format_tools_calls_and_returned_results():
    weather = ToolSpec("get_weather", "", "{}")
    turn = submitted(
        "t2",
        tools=[weather, ToolSpec("add")],
        tool_choice=ToolChoice(ToolChoiceMode.REQUIRED),
        tool_results=[ToolResult("call_t1_0", "sunny")],
    )
    call = ToolCall("call_t2_0", "get_weather", '{"city":"Oslo"}')
    done = completed("t2", finish_reason=FinishReason.TOOL_CALLS, tool_calls=[call])
    row = build_trace(turn, completed=done)
    assert (row.tools_offered, row.tool_choice, row.tool_calls) == (2, "required", ["get_weather"])
    assert row.tool_call_ids == ["call_t2_0"] and row.tool_arguments_bytes == 15
    assert row.tool_result_ids == ["call_t1_0"] and row.finish_reason == "tool_calls"
    plain = build_trace(submitted("t3"), completed=completed("t3"))
    assert (plain.tool_choice, plain.tool_calls, plain.response_format) == ("", [], "")
    shaped = submitted(
        "t4", decoding=DecodingParams(response_format=ResponseFormat(OutputFormat.JSON_OBJECT))
    )
    assert build_trace(shaped, completed=completed("t4")).response_format == "json_object"
    assert (
        build_trace(submitted("t5", tools=[weather]), completed=None, closed_at_ms=2e3).tool_choice
        == "auto"
    )


@given(
    enriched=st.floats(-50, 500) | st.just(0.0),
    assembled=st.floats(-50, 500) | st.just(0.0),
    queue=st.floats(0, 400),
    ttft=st.floats(0, 600) | st.none(),
    e2e=st.floats(0, 1000),
)
def test_hops_add_up_to_end_to_end_whatever_the_marks(enriched, assembled, queue, ttft, e2e):
    start = 1_000_000.0
    hops = latency_hops(
        start,
        enriched_at_ms=start + enriched if enriched else 0.0,
        assembled_at_ms=start + assembled if assembled else 0.0,
        queue_ms=queue,
        ttft_ms=ttft,
        e2e_ms=e2e,
    )
    assert all(value >= 0 for value in hops.values()), hops
    assert sum(hops.values()) == pytest.approx(round(e2e, 3), abs=1e-6)


def test_hops_cut_at_each_mark_and_a_missing_mark_passes_its_time_on():
    start = 1_000_000.0
    marks = dict(queue_ms=40.0, ttft_ms=90.0, e2e_ms=200.0)
    known = latency_hops(start, enriched_at_ms=start + 10, assembled_at_ms=start + 25, **marks)
    assert known == {
        "hop_preprocess_ms": 10.0,
        "hop_assembly_ms": 15.0,
        "hop_queue_ms": 15.0,
        "hop_prefill_ms": 50.0,
        "hop_decode_ms": 110.0,
    }
    unknown = latency_hops(start, enriched_at_ms=0.0, assembled_at_ms=start + 25, **marks)
    assert (unknown["hop_preprocess_ms"], unknown["hop_assembly_ms"]) == (0.0, 25.0)
    no_token = latency_hops(
        start, enriched_at_ms=0, assembled_at_ms=0, **{**marks, "ttft_ms": None}
    )
    assert (no_token["hop_prefill_ms"], no_token["hop_decode_ms"]) == (160.0, 0.0)

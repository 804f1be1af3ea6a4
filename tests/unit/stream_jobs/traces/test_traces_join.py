"""The traces job's join of a turn's events (pure)."""

from __future__ import annotations

from harness.factories import completed, enriched, submitted
from schemas.events import OutputSafety, PromptContext, SafetyAction, Screening, TurnAssembled
from schemas.ids import now_ms
from stream_jobs.traces.state import PendingTrace, on_event


def test_a_trace_is_ready_once_both_ends_are_known_in_any_order():
    context = PromptContext(history_messages=2, dropped_messages=0, prompt_tokens=40)
    turn = submitted("t1")
    assembled = TurnAssembled(
        turn_id="t1", submitted=turn, messages=[], context=context, assembled_at_ms=2.0
    )
    pending = PendingTrace()
    assert on_event(pending, completed("t1")) is None  # completion first: wait for the rest
    assert on_event(pending, enriched("t1", preprocess_ms=3.0)) is not None  # carries submitted
    assert on_event(pending, assembled).context == context
    trace = on_event(pending, turn)
    assert trace is not None and trace.preprocess_ms == 3.0 and trace.completed.turn_id == "t1"


def test_a_turn_that_failed_before_assembly_still_has_a_trace():
    pending = PendingTrace()
    assert on_event(pending, submitted("t2")) is None
    trace = on_event(pending, completed("t2"))
    assert trace is not None and trace.context is None and trace.preprocess_ms == 0.0


def test_the_screening_joins_the_trace_from_whichever_event_carries_it():
    from schemas.traces import build_trace

    allowed = Screening(action=SafetyAction.ALLOW, labels=["profanity"], elapsed_ms=0.4)
    pending = PendingTrace()
    on_event(pending, enriched("t4", screening=allowed))
    trace = on_event(pending, completed("t4"))
    assert trace is not None and trace.screening == allowed
    blocked = Screening(action=SafetyAction.BLOCK, labels=["injection"], error="classifier")
    pending = PendingTrace()
    on_event(pending, submitted("t5"))  # blocked turns are never enriched
    trace = on_event(pending, completed("t5", screening=blocked))
    assert trace is not None and trace.screening == blocked
    row = build_trace(trace.submitted, completed=trace.completed, screening=trace.screening)
    assert (row.input_safety, row.safety_labels, row.safety_error) == (
        "block",
        ["injection"],
        "classifier",
    )
    unscreened = build_trace(submitted("t6"), completed=completed("t6"))
    assert (unscreened.input_safety, unscreened.safety_labels) == ("", [])
    assert (unscreened.output_policy, unscreened.cut_window) == ("", -1)
    checked = OutputSafety(policy="hold_back", windows=3, released=2, cut_window=2, max_hold_ms=9)
    row = build_trace(submitted("t7"), completed=completed("t7", output_safety=checked))
    assert (row.output_policy, row.windows_checked, row.cut_window, row.hold_max_ms) == (
        "hold_back",
        3,
        2,
        9,
    )


def test_a_turn_without_completion_is_closed_as_timed_out():
    from schemas.traces import TRACE_COLUMNS
    from stream_jobs.traces.state import expired, timed_out
    from workers.sink.rows import trace_row

    opened = {b"old": 1_000.0, b"new": 9_000.0}
    assert expired(opened, now_ms=10_000.0, timeout_ms=5_000.0) == [b"old"]
    pending = PendingTrace()
    assert timed_out(pending, "t4", 10_000.0) is None  # never submitted: nothing to record
    turn = submitted("t4", submitted_at_ms=1_800_000_000_000.0)
    on_event(pending, turn)
    trace = timed_out(pending, "t4", 1_800_000_060_000.0)
    assert trace is not None and trace.completed is None
    row = dict(zip(TRACE_COLUMNS, trace_row(trace, now_ms=1_800_000_060_000.0), strict=True))
    assert (row["status"], row["error_code"], row["e2e_ms"]) == ("timed_out", "timed_out", 60_000.0)


def test_a_completion_that_carries_its_assembly_needs_no_assembled_record():
    """How an inference worker's completion comes now: the trace is whole without a
    `turn.assembled` (there is no topic of them to read)."""
    from schemas.events import Route

    context = PromptContext(history_messages=3, dropped_messages=1, prompt_tokens=77)
    route = Route(pool="reasoning", reason="semantic", worker_id="w2", partition=5)
    pending = PendingTrace()
    assert on_event(pending, submitted("t10")) is None
    done = completed("t10", assembled=True, context=context, route=route, preprocess_ms=6.5)
    trace = on_event(pending, done)
    assert trace is not None
    assert (trace.context, trace.route, trace.preprocess_ms) == (context, route, 6.5)
    assert trace.completed is not None  # held once, in the trace's own fields
    assert (trace.completed.context, trace.completed.route) == (None, None)
    # the enriched event, read first, keeps its own preprocessing time
    pending = PendingTrace()
    on_event(pending, enriched("t11", preprocess_ms=3.0))
    trace = on_event(pending, completed("t11", assembled=True, context=context, preprocess_ms=9))
    assert trace is not None and trace.preprocess_ms == 3.0 and trace.context == context


def test_an_answered_turn_waits_for_its_assembly_whatever_order_the_topics_are_read_in():
    """An older completion, without the assembly. The race seen live: submitted and
    completed read before enriched and assembled gave a trace without preprocessing time,
    prompt context or screening."""
    from stream_jobs.traces.state import awaiting_assembly

    allowed = Screening(action=SafetyAction.ALLOW, elapsed_ms=0.5)
    context = PromptContext(history_messages=0, dropped_messages=0, prompt_tokens=9)
    turn = submitted("t8")
    assembled = TurnAssembled(
        turn_id="t8",
        submitted=turn,
        messages=[],
        context=context,
        assembled_at_ms=2.0,
        preprocess_ms=4.5,
        screening=allowed,
    )
    pending = PendingTrace()
    assert on_event(pending, turn) is None
    assert on_event(pending, completed("t8", assembled=True)) is None
    assert awaiting_assembly(pending)
    trace = on_event(pending, assembled)  # the enriched event never read: assembly carries it
    assert trace is not None
    assert (trace.context, trace.preprocess_ms, trace.screening) == (context, 4.5, allowed)


def test_a_completed_turn_whose_assembly_never_comes_is_closed_with_its_completion():
    from schemas.traces import TRACE_COLUMNS
    from stream_jobs.traces.state import awaiting_assembly, timed_out
    from workers.sink.rows import trace_row

    pending = PendingTrace()
    at = 1_800_000_000_000.0
    on_event(pending, submitted("t9", submitted_at_ms=at))
    on_event(pending, completed("t9", assembled=True, completed_at_ms=at + 50))
    assert awaiting_assembly(pending)
    trace = timed_out(pending, "t9", at + 40_000)
    assert trace is not None and trace.completed is not None and trace.context is None
    row = dict(zip(TRACE_COLUMNS, trace_row(trace, now_ms=at + 40_000), strict=True))
    assert (row["status"], row["e2e_ms"]) == ("completed", 3)


def test_the_trace_leaves_out_the_verdicts_the_completion_carried():
    """They are in the events log (a row each) and counted in `output_safety`."""
    from schemas.events import SafetyStage, SafetyVerdict

    verdict = SafetyVerdict(
        turn_id="t8",
        conversation_id="c",
        tenant_id="acme",
        user_id="u",
        stage=SafetyStage.OUTPUT,
        action=SafetyAction.RELEASE,
        window=0,
        at_ms=1.0,
    )
    checked = OutputSafety(policy="optimistic", windows=1, released=1, classified=1)
    pending = PendingTrace()
    on_event(pending, submitted("t8"))
    trace = on_event(pending, completed("t8", output_safety=checked, verdicts=[verdict]))
    assert trace is not None and trace.completed is not None
    assert trace.completed.verdicts == [] and trace.completed.output_safety == checked


def test_the_spoken_language_joins_the_trace_and_its_row():
    from schemas.traces import build_trace

    pending = PendingTrace()
    on_event(pending, enriched("t9", language="es"))
    trace = on_event(pending, completed("t9"))
    assert trace is not None and trace.language == "es"
    row = build_trace(trace.submitted, completed=trace.completed, language=trace.language)
    assert row.language == "es"
    typed = PendingTrace()
    on_event(typed, submitted("t10"))
    assert on_event(typed, completed("t10")).language == ""


def test_the_typed_texts_language_joins_the_trace_and_reaches_its_row():
    from schemas.traces import TRACE_COLUMNS
    from workers.sink.rows import trace_row

    pending = PendingTrace()
    on_event(pending, enriched("t11", text_language="de"))
    trace = on_event(pending, completed("t11", completed_at_ms=now_ms()))
    assert trace is not None and (trace.language, trace.text_language) == ("", "de")
    row = dict(zip(TRACE_COLUMNS, trace_row(trace, now_ms=now_ms()), strict=True))
    assert (row["language"], row["language_source"]) == ("de", "text")

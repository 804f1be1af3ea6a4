"""The traces table and the monitoring views on the real (embedded) ClickHouse engine, fed
with rows built from real events."""

from __future__ import annotations

import textwrap

import pytest

from harness.chdb import check_in_fresh_engine

pytestmark = pytest.mark.integration

CHECK = textwrap.dedent("""
    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from schemas.events import Timings, Usage
    from runtime.settings import Settings
    from schemas.traces import TRACE_COLUMNS, Prices, build_trace
    from harness.factories import completed, submitted

    import time

    now = time.time() * 1000  # the table's TTL drops old rows: stamp them recent
    client = connect(Settings.from_env())
    migrate(client)
    prices = Prices({"m": (1.0, 2.0)})
    rows = []
    for i, user in enumerate(["u1", "u2", "u1"]):
        turn = submitted(f"t{i}", user_id=user, submitted_at_ms=now + i)
        done = completed(
            f"t{i}",
            user_id=user,
            usage=Usage(10, 5),
            timings=Timings(queue_ms=1, ttft_ms=10.0 * (i + 1), e2e_ms=50, itl_ms=[2.0, 4.0]),
            completed_at_ms=now + 50 + i,
        )
        rows.append(build_trace(turn, completed=done, prices=prices).values())
    late = submitted("t9", submitted_at_ms=now)
    rows.append(build_trace(late, closed_at_ms=now + 60_000).values())
    client.insert("turnstream.traces", rows, column_names=list(TRACE_COLUMNS))
    client.insert("turnstream.traces", rows[:1], column_names=list(TRACE_COLUMNS))  # a retry
    count = client.query("SELECT count() FROM turnstream.traces FINAL").result_rows[0][0]
    assert count == 4, count  # the retried row replaced itself
    app = client.query(
        "SELECT sum(turns), max(ttft_p99_ms), max(timeout_rate) FROM turnstream.app_hourly"
    ).result_rows[0]
    assert app[0] == 4 and 29.0 < app[1] <= 30.0 and app[2] > 0, app
    day = client.query(
        "SELECT active_users, completion_tokens, cost_usd FROM turnstream.business_daily"
    ).result_rows[0]
    # users u1, u2 and the timed-out turn's u; its tokens and cost are zero
    assert day[0] == 3 and day[1] == 15 and abs(day[2] - 3 * 20e-6) < 1e-12, day
    print("ok")
""")


def test_traces_and_views_on_the_embedded_engine(tmp_path):
    check_in_fresh_engine(CHECK, tmp_path)


REPORT = textwrap.dedent("""
    import os
    import time
    from pathlib import Path

    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from infra.clickhouse.report import gather, plot, render
    from schemas.events import FeedbackGiven, FeedbackKind, FinishReason, Timings
    from runtime.settings import Settings
    from schemas.traces import TRACE_COLUMNS, build_trace
    from harness.factories import completed, submitted
    from workers.sink.rows import FEEDBACK_COLUMNS, feedback_row

    now = time.time() * 1000
    client = connect(Settings.from_env())
    migrate(client)
    rows = []
    for i in range(30):
        turn = submitted(f"r{i}", tenant_id="acme" if i % 3 else "globex", submitted_at_ms=now)
        done = completed(
            f"r{i}",
            finish_reason=FinishReason.ERROR if i == 0 else FinishReason.STOP,
            timings=Timings(queue_ms=1, ttft_ms=20.0 + i, e2e_ms=100.0 + i, itl_ms=[5.0]),
            completed_at_ms=now + 100,
        )
        rows.append(build_trace(turn, completed=done).values())
    client.insert("turnstream.traces", rows, column_names=list(TRACE_COLUMNS))
    feedback = [
        feedback_row(
            FeedbackGiven(turn_id=t, conversation_id="c", tenant_id="acme", user_id="u",
                          kind=kind, given_at_ms=now),
            now_ms=now,
        )
        for t, kind in [("r1", FeedbackKind.THUMBS_UP), ("r2", FeedbackKind.THUMBS_DOWN)]
    ]
    client.insert("turnstream.feedback", feedback, column_names=list(FEEDBACK_COLUMNS))
    report = gather(client, hours=24)
    assert report.headline["turns"] == 30 and len(report.ttft) == 30, report.headline
    assert abs(report.headline["error_rate"] - 1 / 30) < 1e-9
    assert {row[0] for row in report.business} == {"acme", "globex"}
    out = Path(os.environ["TURNSTREAM_HOME"])  # the test's own folder, not the repo
    page = render(report, "report.png")
    assert "30 turns" in page and "thumbs up 50.0% of 2 rated turns" in page, page
    plot(report, out / "report.png")
    assert (out / "report.png").stat().st_size > 10_000
    print("ok")
""")


def test_the_report_summarises_the_layers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_in_fresh_engine(REPORT, tmp_path)


TOOL_CALLS = textwrap.dedent("""
    import time

    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from runtime.settings import Settings
    import msgspec
    from schemas.events import FinishReason, ToolCall, ToolResult, ToolRun, ToolSpec
    from schemas.traces import TRACE_COLUMNS, build_trace
    from harness.factories import completed, submitted

    now = time.time() * 1000
    client = connect(Settings.from_env())
    migrate(client)
    tools = [ToolSpec("get_weather"), ToolSpec("add")]
    calls = [ToolCall("call_a_0", "get_weather", "{}"), ToolCall("call_a_1", "add", "{}")]
    asked = submitted("a", tools=tools, submitted_at_ms=now)
    called = completed("a", finish_reason=FinishReason.TOOL_CALLS, tool_calls=calls,
                       completed_at_ms=now + 100)
    answered = submitted("b", tools=tools, submitted_at_ms=now + 350,
                         tool_results=[ToolResult("call_a_0", "sunny")])
    rows = [
        build_trace(asked, completed=called).values(),
        build_trace(answered, completed=completed("b", completed_at_ms=now + 400)).values(),
    ]
    client.insert("turnstream.traces", rows, column_names=list(TRACE_COLUMNS))
    got = client.query(
        "SELECT name, call_id, finish_reason, result_turn_id, client_ms "
        "FROM turnstream.tool_calls ORDER BY call_id"
    ).result_rows
    assert got == [
        ("get_weather", "call_a_0", "tool_calls", "b", 250),
        ("add", "call_a_1", "tool_calls", "", None),  # its result never came
    ], got
    # a server tool's call: the tools worker ran it (a replay of the books, here)
    served = [ToolSpec("kv__put", server="kv")]
    put = ToolCall("call_c_0", "kv__put", "{}")
    # stamped recent: a row from 1970 is past the table's TTL and a merge may drop it any time
    continuation = submitted("d", tools=served, tool_round=1, submitted_at_ms=now + 600)
    run = ToolRun("call_c_0", "ok", 12.5, True, 2)
    client.insert("turnstream.traces", [
        build_trace(submitted("c", tools=served, submitted_at_ms=now + 500), completed=completed(
            "c", finish_reason=FinishReason.TOOL_CALLS, tool_calls=[put],
            continuation=continuation, completed_at_ms=now + 550)).values(),
        build_trace(msgspec.structs.replace(continuation, tool_results=[
            ToolResult("call_c_0", "stored", "kv__put", run)]),
            completed=completed("d", completed_at_ms=now + 700)).values(),
    ], column_names=list(TRACE_COLUMNS))
    got = client.query(
        "SELECT executor, result_turn_id, outcome, run_ms, replayed, idempotency_key "
        "FROM turnstream.tool_calls ORDER BY call_id"
    ).result_rows
    assert got == [
        ("client", "b", "", 0.0, 0, ""),  # the client ran it: no run of ours
        ("client", "", "", 0.0, 0, ""),
        ("server", "d", "ok", 12.5, 1, "call_c_0"),
    ], got
    print("ok")
""")


def test_tool_calls_pair_with_the_turns_that_returned_their_results(tmp_path):
    check_in_fresh_engine(TOOL_CALLS, tmp_path)


HOPS_AND_LIVE = textwrap.dedent("""
    import time

    from harness.factories import completed, submitted
    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from runtime.settings import Settings
    from schemas.events import PromptContext, Timings
    from schemas.traces import TRACE_COLUMNS, build_trace

    now = time.time() * 1000
    client = connect(Settings.from_env())
    migrate(client)
    rows = []
    for i, (run_id, arm) in enumerate(
        [("", ""), ("", "control"), ("", "terse"), ("run-1", ""), ("run-1", "")]
    ):
        turn = submitted(
            f"t{i}", submitted_at_ms=now, run_id=run_id, arm=arm, edge_id=f"edge-{i % 2}"
        )
        done = completed(
            f"t{i}",
            timings=Timings(queue_ms=40, ttft_ms=90.0, e2e_ms=200, itl_ms=[]),
            completed_at_ms=now + 200,
        )
        context = PromptContext(
            history_messages=0, dropped_messages=0, prompt_tokens=1, assembled_at_ms=now + 25
        )
        trace = build_trace(
            turn, completed=done, context=context, enriched_at_ms=now + 10, image_cache_hits=i
        )
        rows.append(trace.values())
    client.insert("turnstream.traces", rows, column_names=list(TRACE_COLUMNS))
    hops = client.query(
        "SELECT hop_preprocess_ms, hop_assembly_ms, hop_queue_ms, hop_prefill_ms, "
        "hop_decode_ms, e2e_ms, edge_id, image_cache_hits FROM turnstream.traces FINAL "
        "WHERE turn_id = 't1'"
    ).result_rows[0]
    assert hops == (10.0, 15.0, 15.0, 50.0, 110.0, 200.0, "edge-1", 1), hops
    live = {
        view: client.command(f"SELECT sum(turns) FROM turnstream.{view}")
        for view in ("app_hourly", "business_daily", "quality_daily")
    }
    assert live == {"app_hourly": 2, "business_daily": 2, "quality_daily": 2}, live
    assert client.command("SELECT sum(screened + 1) FROM turnstream.safety_daily") == 1
    every = client.query(
        "SELECT run_id, arm, sum(turns) FROM turnstream.app_hourly_all "
        "GROUP BY run_id, arm ORDER BY run_id, arm"
    ).result_rows
    assert every == [("", "", 1), ("", "control", 1), ("", "terse", 1), ("run-1", "", 2)], every
    for view in ("business_daily_all", "quality_daily_all", "safety_daily_all"):
        assert client.command(f"SELECT count() FROM turnstream.{view}") >= 3, view
    split = client.query(
        "SELECT hop_preprocess_ms + hop_assembly_ms + hop_queue_ms + hop_prefill_ms "
        "+ hop_decode_ms, e2e_avg_ms FROM turnstream.app_hourly"
    ).result_rows[0]
    assert abs(split[0] - split[1]) < 1e-3, split  # the means add up as the hops do
    print("ok")
""")


def test_hops_edges_image_hits_and_live_views_without_replays_and_canary_arms(tmp_path):
    check_in_fresh_engine(HOPS_AND_LIVE, tmp_path)


SPEECH_HOPS = textwrap.dedent("""
    import time

    from harness.factories import completed, submitted
    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from runtime.settings import Settings
    from schemas.events import PromptContext, SpeechDelivered, SpeechSettings, Timings
    from schemas.traces import TRACE_COLUMNS, build_trace
    from workers.sink.event_log import EVENT_COLUMNS, event_row

    now = time.time() * 1000
    client = connect(Settings.from_env())
    migrate(client)
    # t0 spoken by the voice loop (heard in Spanish), t1 typed in French and answered aloud,
    # t2 typed with no speech, t3 a canary arm's, t4 spoken but no audio ever went out
    turns = {
        "t0": dict(speech_ended_at_ms=now - 600, language="es"),
        "t1": dict(text_language="fr"),
        "t2": dict(),
        "t3": dict(arm="terse"),
        "t4": dict(),
    }
    rows = []
    for turn_id, how in turns.items():
        turn = submitted(
            turn_id,
            submitted_at_ms=now,
            speech=SpeechSettings(),
            arm=how.get("arm", ""),
            speech_ended_at_ms=how.get("speech_ended_at_ms", 0.0),
        )
        done = completed(
            turn_id,
            timings=Timings(queue_ms=350, ttft_ms=500.0, e2e_ms=900, itl_ms=[]),
            completed_at_ms=now + 900,
        )
        context = PromptContext(
            history_messages=0, dropped_messages=0, prompt_tokens=1, assembled_at_ms=now + 320
        )
        trace = build_trace(
            turn,
            completed=done,
            context=context,
            enriched_at_ms=now + 300,
            language=how.get("language", ""),
            text_language=how.get("text_language", ""),
        )
        rows.append(trace.values())
    client.insert("turnstream.traces", rows, column_names=list(TRACE_COLUMNS))

    def delivered(turn_id, first_audio_at_ms, edge="edge-0"):
        return SpeechDelivered(
            turn_id=turn_id,
            conversation_id="c",
            tenant_id="acme",
            user_id="u",
            edge_id=edge,
            first_audio_at_ms=first_audio_at_ms,
            ended_at_ms=now + 5000,
            audio_ms=4000.0,
        )

    deliveries = [
        delivered("t0", now + 800),
        delivered("t0", now + 2000, edge="edge-1"),  # a resume elsewhere: the first one counts
        delivered("t1", now + 650),
        delivered("t3", now + 700),
        delivered("t4", 0.0),
    ]
    events = [
        (*event_row(d, now_ms=now), "turns.completed", 0, offset)
        for offset, d in enumerate(deliveries)
    ]
    columns = [*EVENT_COLUMNS, "kafka_topic", "kafka_partition", "kafka_offset"]
    client.insert("turnstream.events", events, column_names=columns)

    sources = client.query(
        "SELECT turn_id, language, language_source, hop_endpointing_ms "
        "FROM turnstream.traces FINAL ORDER BY turn_id"
    ).result_rows
    assert sources[:3] == [
        ("t0", "es", "speech", 600.0),
        ("t1", "fr", "text", 0.0),
        ("t2", "", "", 0.0),
    ], sources
    hops = client.query(
        "SELECT turn_id, language, endpointing_ms, transcript_ms, first_token_ms, "
        "first_audio_ms, total_ms, spoken_question FROM turnstream.speech_hops ORDER BY turn_id"
    ).result_rows
    assert hops == [
        ("t0", "es", 600.0, 300.0, 200.0, 300.0, 1400.0, 0),
        ("t1", "fr", 0.0, 300.0, 200.0, 150.0, 650.0, 0),
    ], hops
    every = client.query(
        "SELECT turn_id, arm FROM turnstream.speech_hops_all ORDER BY turn_id"
    ).result_rows
    assert every == [("t0", ""), ("t1", ""), ("t3", "terse")], every
    print("ok")
""")


def test_speech_hops_add_up_from_the_end_of_speech_to_the_first_audio(tmp_path):
    check_in_fresh_engine(SPEECH_HOPS, tmp_path)

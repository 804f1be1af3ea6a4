"""The `events` table and the `turn_timeline` view on the real (embedded) ClickHouse engine,
fed with rows built from real events (as the sink inserts them, with their Kafka source)."""

from __future__ import annotations

import textwrap

import pytest

from harness.chdb import check_in_fresh_engine

pytestmark = pytest.mark.integration

CHECK = textwrap.dedent("""
    import time

    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from schemas.events import Message, PromptContext, Role, TurnAssembled, TurnEnriched
    from runtime.settings import Settings
    from harness.factories import completed, submitted
    from workers.sink.event_log import EVENT_COLUMNS, event_row

    now = float(int(time.time() * 1000))  # the table's TTL drops old rows: stamp them recent
    client = connect(Settings.from_env())
    migrate(client)
    turn = submitted("t1", submitted_at_ms=now)
    events = [
        turn,
        TurnEnriched(turn_id="t1", submitted=turn, text="q", preprocess_ms=0.2),  # same ms
        TurnAssembled(
            turn_id="t1", submitted=turn, messages=[Message(Role.USER, "q")],
            context=PromptContext(history_messages=0, dropped_messages=0, prompt_tokens=1),
            assembled_at_ms=now + 15,
        ),
        completed("t1", completed_at_ms=now + 115),
        submitted("t2", submitted_at_ms=now + 1),
    ]
    rows = [
        (*event_row(e, now_ms=now), f"ns.{topic}", 3, offset)
        for offset, (e, topic) in enumerate(zip(events, [
            "turns.submitted", "turns.enriched", "inference.chat", "turns.completed",
            "turns.submitted",
        ]))
    ]
    columns = [*EVENT_COLUMNS, "kafka_topic", "kafka_partition", "kafka_offset"]
    client.insert("turnstream.events", rows, column_names=columns)
    client.insert("turnstream.events", rows[:2], column_names=columns)  # a re-read
    count = client.query("SELECT count() FROM turnstream.events FINAL").result_rows[0][0]
    assert count == 5, count  # the re-read records replaced themselves
    timeline = client.query(
        "SELECT kind, gap_ms, since_first_ms FROM turnstream.turn_timeline(turn = 't1')"
    ).result_rows
    assert timeline == [
        ("turn.submitted", 0, 0),
        ("turn.enriched", 0, 0),  # the same millisecond: ordered by step
        ("turn.assembled", 15, 15),
        ("turn.completed", 100, 115),
    ], timeline
    prompt = client.query(
        "SELECT JSONExtractString(JSONExtractArrayRaw(payload, 'messages')[1], 'content'), "
        "kafka_topic, kafka_offset FROM turnstream.events "
        "WHERE turn_id = 't1' AND kind = 'turn.assembled'"
    ).result_rows
    assert prompt == [("q", "ns.inference.chat", 2)], prompt
    print("ok")
""")


def test_events_and_timeline_on_the_embedded_engine(tmp_path):
    check_in_fresh_engine(CHECK, tmp_path)

"""The `events` log of real turns: edge → preprocessing → assembly → inference (fake engine)
on real Kafka, then the ClickHouse sink's route "events" (embedded engine, in a process of
its own: chdb allows one data directory per process) writes one row per event. Each turn
shows its submitted, enriched, assembled and completed events in time order, then the
feedback on it, each with the Kafka record it came from; the safety verdicts, which ride on
the enriched and completed records, in their own rows between them."""

from __future__ import annotations

import asyncio
import json
import textwrap
import uuid

import pytest

from harness.chdb import run_in_engine
from harness.stack import pipeline
from runtime.settings import Settings
from schemas.events import FeedbackKind
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient, image_part

pytestmark = pytest.mark.integration

SINK_AND_QUERY = textwrap.dedent("""
    import asyncio, json, sys

    from runtime.clickhouse.client import connect
    from runtime.settings import Settings
    from workers.sink.app import run_sink

    namespace, wanted = sys.argv[1], json.loads(sys.argv[2])  # turn id → kinds it must have
    settings = Settings.from_env(namespace=namespace, sink_linger_ms=50)
    client = connect(settings)
    QUERY = (
        "SELECT turn_id, kind, toUnixTimestamp64Milli(at), step, user_id, tenant_id, actor, "
        "detail, error_code, text_bytes, JSONExtractString(payload, 'type'), kafka_topic "
        "FROM turnstream.events FINAL WHERE turn_id IN %(ids)s ORDER BY turn_id, at, step"
    )

    def rows() -> list:
        return client.query(QUERY, parameters={"ids": list(wanted)}).result_rows

    def complete() -> bool:
        seen = {(r[0], r[1]) for r in rows()}
        return all((t, k) in seen for t, kinds in wanted.items() for k in kinds)

    async def sink_until_written() -> None:
        async with run_sink(settings, client, ("events",)):
            async with asyncio.timeout(120):
                while not await asyncio.to_thread(complete):
                    await asyncio.sleep(0.1)

    asyncio.run(sink_until_written())
    print(json.dumps(rows()))
""")
# a turn's life as the log orders it: the input screen judges the preprocessed text
STAGES = [
    "turn.submitted",
    "turn.enriched",
    "safety.verdict",
    "turn.assembled",
    "turn.completed",
]
TOPIC_OF = {
    "turn.submitted": "turns.submitted",
    "turn.enriched": "turns.enriched",
    "turn.assembled": "inference.chat",  # the pool's work queue is its record
    "turn.completed": "turns.completed",
    "feedback.given": "feedback",
}
# the verdicts ride on the events after them: no record of their own
VERDICT_TOPIC_OF = {"input": "turns.enriched", "output": "turns.completed"}


async def test_every_event_of_real_turns_lands_in_order(services, session_namespace, tmp_path):
    settings = Settings.from_env(namespace=f"{session_namespace}-events", edge_port=0)
    async with (
        pipeline(settings, FakeEngine(token_interval_s=0.001)) as p,
        EdgeClient.connect(p.url, p.token("tracy")) as client,
    ):
        conversation = f"c-{uuid.uuid4().hex[:8]}"
        first = await client.ask(conversation, "hello there")
        second = await client.ask(conversation, "and again")
        svg = b"<svg xmlns='http://www.w3.org/2000/svg'/>"
        failed = await client.ask(f"c-{uuid.uuid4().hex[:8]}", "", parts=[image_part(svg)])
        await client.give_feedback(first.turn_id, FeedbackKind.THUMBS_DOWN, "too short")
        await client.give_feedback(first.turn_id, FeedbackKind.REGENERATE)
    wanted = {
        first.turn_id: [*STAGES, "feedback.given"],
        second.turn_id: STAGES,
        failed.turn_id: ["turn.submitted", "turn.completed"],
    }
    args = (settings.namespace, json.dumps(wanted))
    out = await asyncio.to_thread(run_in_engine, SINK_AND_QUERY, tmp_path / "home", *args)
    rows = json.loads(out.strip().splitlines()[-1])
    by_turn: dict[str, list[dict]] = {}
    names = [
        "turn",
        "kind",
        "at",
        "step",
        "user",
        "tenant",
        "actor",
        "detail",
        "error",
        "text_bytes",
        "tag",
        "topic",
    ]
    for row in rows:
        by_turn.setdefault(row[0], []).append(dict(zip(names, row, strict=True)))

    for turn in (first, second):  # ordered by time (ties by step): the pipeline's order
        log = by_turn[turn.turn_id]
        windows = [e for e in log if e["detail"].startswith("output:")]
        assert windows and all(e["detail"] == "output:release" for e in windows)
        by_turn[turn.turn_id] = [e for e in log if e not in windows]  # the turn's own steps
        assert [e["kind"] for e in by_turn[turn.turn_id]][:5] == STAGES
        stages = [e["kind"] for e in log]
        assert stages.index("turn.assembled") < log.index(windows[0])
        assert log.index(windows[-1]) < stages.index("turn.completed")
    first_log = by_turn[first.turn_id]
    assert first_log[2]["detail"] == "input:allow" and first_log[2]["actor"] != ""
    assert [(e["kind"], e["detail"]) for e in first_log[5:]] == [
        ("feedback.given", "thumbs_down"),
        ("feedback.given", "regenerate"),
    ]
    assert first_log[-1]["at"] >= first_log[4]["at"] > first_log[0]["at"]
    for event in (e for log in by_turn.values() for e in log):
        assert (event["user"], event["tenant"], event["tag"]) == ("tracy", "acme", event["kind"])
        if event["kind"] == "safety.verdict":
            topic = VERDICT_TOPIC_OF[event["detail"].split(":")[0]]
        else:
            topic = TOPIC_OF[event["kind"]]
        assert event["topic"] == f"{settings.namespace}.{topic}"
    done = {t: next(e for e in log if e["kind"] == "turn.completed") for t, log in by_turn.items()}
    assert (done[first.turn_id]["detail"], done[first.turn_id]["error"]) == ("stop", "")
    assert done[first.turn_id]["actor"] != "" and done[first.turn_id]["text_bytes"] > 0
    assert (done[failed.turn_id]["detail"], done[failed.turn_id]["error"]) == (
        "error",
        "unsupported_media",
    )
    prompt = {
        t.turn_id: next(e for e in by_turn[t.turn_id] if e["kind"] == "turn.assembled")
        for t in (first, second)
    }
    # the second prompt carries the first exchange: it is longer than the first
    assert prompt[second.turn_id]["text_bytes"] > prompt[first.turn_id]["text_bytes"] > 0

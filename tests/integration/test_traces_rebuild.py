"""The traces job keeps its open turns in memory only: a restarted job rebuilds them from
the events it had processed (real Kafka, the real job as a process)."""

from __future__ import annotations

import uuid

import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from harness.factories import completed, enriched, submitted
from harness.kafka import find_record, records_so_far
from harness.polling import eventually
from harness.stack import running_job
from runtime.kafka_topics import ensure_topics
from runtime.settings import Settings
from schemas.codec import decode, encode
from schemas.events import TraceRecorded
from schemas.ids import now_ms
from schemas.topics import TRACES, TURNS_COMPLETED, TURNS_ENRICHED, TURNS_SUBMITTED

pytestmark = pytest.mark.integration


async def processed(settings: Settings, *topics: str) -> set[str]:
    """The topics on which the traces job's group has committed an offset."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(f"{settings.namespace}.traces")
    finally:
        await admin.close()
    return {tp.topic for tp, meta in offsets.items() if meta.offset > 0 and tp.topic in topics}


async def test_a_restarted_job_traces_once_a_turn_it_had_half_joined(services, session_namespace):
    """Submitted and enriched are processed (and committed) by one job; the completion
    comes after it stopped. The next job traces the turn once, with the preprocessing time
    only the enriched event carried, and does not trace again the turn that was done. A
    third turn stands for a crash: its completion is after the committed offsets, but its
    trace is already in `traces` (sent by a job that died before committing); the next job
    must not trace it a second time."""
    settings = Settings.from_env(
        namespace=f"{session_namespace}-rebuild-{uuid.uuid4().hex[:6]}", trace_tick_s=0.5
    )
    ns = settings.namespace
    await ensure_topics(settings.kafka_bootstrap, ns)
    conversation, half, done = f"c-{uuid.uuid4().hex[:8]}", "half-turn", "done-turn"
    crashed = "crashed-turn"
    at = now_ms()

    def turn(turn_id: str):
        return submitted(turn_id, conversation_id=conversation, submitted_at_ms=at)

    half_enriched = msgspec.structs.replace(enriched(half, preprocess_ms=7.5), submitted=turn(half))
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:

        async def send(topic, event, partition: int | None = None) -> int:
            value = encode(event)
            key = conversation.encode()
            sent = await producer.send_and_wait(topic.full_name(ns), value, key, partition)
            return sent.partition

        async def processed_all(names: set[str]) -> bool:
            return await processed(settings, *names) == names

        async with running_job(settings, "traces"):
            await send(TURNS_SUBMITTED, turn(done))
            await send(TURNS_COMPLETED, completed(done, conversation_id=conversation))
            await send(TURNS_SUBMITTED, turn(half))
            await send(TURNS_ENRICHED, half_enriched)
            partition = await send(TURNS_SUBMITTED, turn(crashed))
            names = {t.full_name(ns) for t in (TURNS_SUBMITTED, TURNS_ENRICHED, TURNS_COMPLETED)}
            await eventually(lambda: processed_all(names), timeout_s=60)

        crashed_completed = completed(crashed, conversation_id=conversation)
        already = TraceRecorded(
            turn_id=crashed, submitted=turn(crashed), completed=crashed_completed
        )
        await send(TRACES, already, partition)  # where the dead job would have sent it
        await send(TURNS_COMPLETED, crashed_completed)
        async with running_job(settings, "traces"):
            # after the crashed turn's completion on the same partition: once this one is
            # traced, that one was processed
            await send(TURNS_COMPLETED, completed(half, conversation_id=conversation))
            record = await find_record(
                settings.kafka_bootstrap, TRACES.full_name(ns), lambda r: half.encode() in r.value
            )
    finally:
        await producer.stop()
    trace = decode(record.value)
    assert isinstance(trace, TraceRecorded) and trace.completed is not None
    assert trace.preprocess_ms == 7.5  # known only from before the restart
    traces = await records_so_far(settings.kafka_bootstrap, TRACES.full_name(ns), lambda r: True)
    assert sorted(decode(r.value).turn_id for r in traces) == [crashed, done, half]

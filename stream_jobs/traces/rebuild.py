"""Reading back what the traces job had already processed on a partition, to rebuild its
open turns (`open_turns.rebuild`): the records between the replay horizon and the offsets
its consumer group committed, on every topic it reads, and the traces it had sent there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from runtime.kafka_ranges import groupless_consumer, read_ranges, stop_consumer
from schemas.ids import now_ms


async def committed_offsets(
    bootstrap: str, group_id: str, tps: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """The group's committed offsets of `tps` (the next record it will process); those
    without a commit are left out."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group_id, partitions=tps)
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in offsets.items() if meta.offset > 0}


@dataclass(frozen=True, slots=True)
class Processed:
    """What a rebuild reads: the source records the group had processed, and the traces
    the job had sent on the same partitions since the horizon (some for events it
    processed but never committed: those are redelivered and must not be traced again)."""

    records: list[ConsumerRecord]
    traces: list[ConsumerRecord]


async def processed_records(
    bootstrap: str,
    group_id: str,
    tps: list[TopicPartition],
    traces_tps: list[TopicPartition],
    horizon: Callable[[float], float],
) -> Processed:
    """The records of `tps` the group processed from `horizon(t)` on, where t is the
    timestamp of the last record it processed on that partition number (when it stopped
    there, however long ago; the topics of one number are co-partitioned), and the records
    of `traces_tps` from the same time to their end."""
    committed = await committed_offsets(bootstrap, group_id, tps)
    consumer = groupless_consumer(bootstrap)
    await consumer.start()
    try:
        last = await read_ranges(consumer, {tp: (end - 1, end) for tp, end in committed.items()})
        stopped: dict[int, float] = {}
        for record in last:
            stopped[record.partition] = max(stopped.get(record.partition, 0.0), record.timestamp)
        ends = {**await consumer.end_offsets(traces_tps), **committed}
        since = {tp: int(max(0.0, horizon(stopped.get(tp.partition, now_ms())))) for tp in ends}
        starts = await consumer.offsets_for_times(since)
        ranges = {tp: (found.offset, ends[tp]) for tp, found in starts.items() if found}
        found = await read_ranges(consumer, ranges)
    finally:
        await stop_consumer(consumer)
    traces = set(traces_tps)
    return Processed(
        records=[r for r in found if TopicPartition(r.topic, r.partition) not in traces],
        traces=[r for r in found if TopicPartition(r.topic, r.partition) in traces],
    )

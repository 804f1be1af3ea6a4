"""Where a replay's turns come from: an eval set's folder, or a slice of a recorded topic.

Reading never joins a consumer group and never commits: a replay reads live topics the way
an analyst would, leaving the live consumers' positions untouched.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition

from producers.errors import ProducerError
from runtime.kafka_ranges import partitions_of, stop_consumer
from schemas.codec import decode
from schemas.errors import DecodeError
from schemas.events import TurnSubmitted
from schemas.flywheel import EvalItem, EvalSetManifest, read_jsonl


class SourceError(ProducerError, RuntimeError):
    """The source cannot be read as asked (a missing set, a tampered file, no such topic)."""


def read_eval_set(folder: Path) -> tuple[EvalSetManifest, list[EvalItem]]:
    """A set version's manifest and items; the items must be the ones the manifest pins."""
    manifest_path, items_path = folder / "manifest.json", folder / "items.jsonl"
    if not manifest_path.is_file() or not items_path.is_file():
        raise SourceError(f"{folder} is not an eval set version (manifest.json + items.jsonl)")
    try:
        manifest = msgspec.json.decode(manifest_path.read_bytes(), type=EvalSetManifest)
        items = read_jsonl(items_path, EvalItem)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SourceError(f"{folder}: {exc}") from None
    digest = hashlib.sha256(items_path.read_bytes()).hexdigest()
    if digest != manifest.items_sha256:
        raise SourceError(
            f"{items_path} changed since the set was built (sha256 {digest[:12]}…, the "
            f"manifest pins {manifest.items_sha256[:12]}…): build a new version instead"
        )
    return manifest, items


async def read_recorded(
    bootstrap: str, topic: str, *, start_ms: float, end_ms: float
) -> tuple[list[TurnSubmitted], int]:
    """The `turn.submitted` events of `topic` recorded in [start_ms, end_ms), and how many
    records there were unreadable (skipped and counted, never silently)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = await partitions_of(consumer, topic)
        if not partitions:
            raise SourceError(f"no topic {topic!r} on {bootstrap} (is the name right?)")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        starts = await consumer.offsets_for_times({tp: int(start_ms) for tp in tps})
        todo: dict[TopicPartition, int] = {}
        for tp in tps:
            found = starts.get(tp)
            if found is None or found.offset >= ends[tp]:
                continue  # nothing at or after the start in this partition
            consumer.seek(tp, found.offset)
            todo[tp] = ends[tp]
        turns: list[TurnSubmitted] = []
        unreadable = 0
        while todo:
            batches = await consumer.getmany(*todo, timeout_ms=1000)
            for tp, records in batches.items():
                for record in records:
                    if record.offset >= todo.get(tp, 0):
                        continue
                    if record.timestamp >= end_ms:
                        todo.pop(tp, None)  # past the slice: this partition is done
                        break
                    try:
                        event = decode(record.value)
                    except DecodeError:
                        unreadable += 1
                        continue
                    if isinstance(event, TurnSubmitted):
                        turns.append(event)
                if tp in todo and await consumer.position(tp) >= todo[tp]:
                    todo.pop(tp)
        return turns, unreadable
    finally:
        await stop_consumer(consumer)

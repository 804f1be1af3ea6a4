"""`python -m bench.traces_rebuild`: what a restart of the traces job costs now that its open
turns are rebuilt from the source topics instead of a changelog.

Writes `--turns` finished turns (submitted, enriched, completed with its assembly, spread over the
partitions) plus `--open` unfinished ones into a namespace of its own on the local broker,
commits a consumer group's offsets at the end of every topic (as a job that had processed
them all would have), then times what the job does when it gets all partitions: read back
the processed records (`stream_jobs.traces.rebuild.processed_records`) and replay them
(`open_turns.rebuild`), `--repeats` times. Prints records/s and the median [lowest-highest];
checks the rebuilt open turns are exactly the unfinished ones. Drops the namespace after.

    python -m bench.traces_rebuild --turns 20000 --open 100
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.namespace import drop_namespace
from bench.stats import summary
from runtime.kafka_topics import ensure_topics
from runtime.settings import Settings
from schemas.codec import decode, encode
from schemas.events import (
    FinishReason,
    PromptContext,
    Timings,
    TurnCompleted,
    TurnEnriched,
    TurnSubmitted,
    Usage,
)
from schemas.ids import now_ms
from schemas.topics import (
    TRACE_TICKS,
    TRACES,
    TURNS_COMPLETED,
    TURNS_ENRICHED,
    TURNS_SUBMITTED,
)
from stream_jobs.traces.open_turns import TICK, rebuild, replay_horizon_ms
from stream_jobs.traces.rebuild import processed_records

TIMEOUT_MS, GRACE_MS, TICK_MS = 900_000.0, 30_000.0, 10_000.0


def turn_events(turn_id: str, conversation: str, at: float, *, finished: bool) -> list:
    submitted = TurnSubmitted(
        turn_id=turn_id,
        conversation_id=conversation,
        tenant_id="bench",
        user_id="u",
        edge_id="e",
        text="what does a restart cost? " * 4,
        submitted_at_ms=at,
    )
    events = [
        (TURNS_SUBMITTED, submitted),
        (TURNS_ENRICHED, TurnEnriched(turn_id=turn_id, submitted=submitted, text=submitted.text)),
    ]
    if finished:
        completed = TurnCompleted(
            turn_id=turn_id,
            conversation_id=conversation,
            tenant_id="bench",
            user_id="u",
            finish_reason=FinishReason.STOP,
            text="an answer " * 30,
            usage=Usage(90, 32),
            timings=Timings(queue_ms=1, ttft_ms=20, e2e_ms=640),
            model="fake",
            worker_id="w",
            completed_at_ms=at + 640,
            assembled=True,
            context=PromptContext(history_messages=4, dropped_messages=0, prompt_tokens=90),
        )
        events.append((TURNS_COMPLETED, completed))
    return events


async def write_turns(settings: Settings, turns: int, unfinished: int) -> set[str]:
    """The turns' events, and the ids of the unfinished ones."""
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, linger_ms=20, max_batch_size=256 * 1024
    )
    await producer.start()
    open_ids: set[str] = set()
    at = now_ms()
    try:
        for i in range(turns + unfinished):
            conversation = f"c{i % 512}"
            finished = i < turns
            turn_id = f"t{i}"
            if not finished:
                open_ids.add(turn_id)
            for topic, event in turn_events(turn_id, conversation, at, finished=finished):
                await producer.send(
                    topic.full_name(settings.namespace), encode(event), conversation.encode()
                )
            if i % 2000 == 0:
                print(f"  wrote {i:,} turns", flush=True)
        for partition in range(TRACE_TICKS.partitions):
            await producer.send(
                TRACE_TICKS.full_name(settings.namespace), b"tick", partition=partition
            )
        await producer.flush()
    finally:
        await producer.stop()
    return open_ids


async def commit_all(settings: Settings, group: str, tps: list[TopicPartition]) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)
        await consumer.commit({tp: end for tp, end in ends.items() if end > 0})
    finally:
        await consumer.stop()


async def main(args: argparse.Namespace) -> None:
    settings = Settings.from_env(namespace=f"rebuild-{uuid.uuid4().hex[:6]}")
    ns = settings.namespace
    await ensure_topics(settings.kafka_bootstrap, ns)
    topics = [
        t.full_name(ns) for t in (TURNS_SUBMITTED, TURNS_ENRICHED, TURNS_COMPLETED, TRACE_TICKS)
    ]
    tps = [TopicPartition(t, p) for t in topics for p in range(TURNS_SUBMITTED.partitions)]
    group = f"{ns}.traces"
    try:
        print(f"writing {args.turns:,} finished and {args.open} open turns to {ns}", flush=True)
        open_ids = await write_turns(settings, args.turns, args.open)
        await commit_all(settings, group, tps)
        read_s, replay_s, counts = [], [], []
        for repeat in range(args.repeats):
            started = time.perf_counter()
            processed = await processed_records(
                settings.kafka_bootstrap,
                group,
                tps,
                [TopicPartition(TRACES.full_name(ns), p) for p in range(TRACES.partitions)],
                lambda stopped: replay_horizon_ms(stopped, TIMEOUT_MS, TICK_MS),
            )
            records = processed.records
            read = time.perf_counter()
            replayed = [
                (float(r.timestamp), TICK if r.topic == topics[-1] else decode(r.value))
                for r in records
            ]
            turns, emitted = rebuild(replayed, TIMEOUT_MS, GRACE_MS)
            done = time.perf_counter()
            rebuilt = {key.decode() for key in turns.pending}
            assert rebuilt == open_ids, f"rebuilt {len(rebuilt)} open turns, {len(open_ids)} were"
            assert len(emitted) == args.turns, (len(emitted), args.turns)
            read_s.append(read - started)
            replay_s.append(done - read)
            counts.append(len(records))
            print(
                f"  repeat {repeat + 1}/{args.repeats}: {len(records):,} records, read "
                f"{read - started:.2f} s, replay {done - read:.2f} s",
                flush=True,
            )
        total = [a + b for a, b in zip(read_s, replay_s, strict=True)]
        for name, values in (("read", read_s), ("replay", replay_s), ("total", total)):
            s = summary(values)
            print(f"{name:>7}: {s['p50']:.2f} s [{min(values):.2f}-{max(values):.2f}]")
        rate = counts[0] / summary(total)["p50"]
        print(f"{counts[0]:,} records ({args.turns + args.open:,} turns): {rate:,.0f} records/s")
    finally:
        await drop_namespace(settings)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--open", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()

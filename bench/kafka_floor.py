"""What one Kafka record costs in CPU, client and broker, before any work is done with it.

A turn is ~10 records (`bench.cost`), each produced once and read live by one or more
consumer groups. This measures that plumbing alone on the local broker: N records of
`--bytes` each, produced the way the roles produce (acks=all, no linger) with `--in-flight`
sends outstanding at once, while `--groups` consumers tail the topic and commit after each
batch they get, the way `workers.runtime.consumer` does. Around the run it reads this
process's CPU (every thread: librdkafka's too) and the broker's (its JVM's `/proc`), and
reports microseconds per record, median [low..high] of `--repeats`.

One in flight is a conversation's hop (each turn's record goes alone: nothing to batch
with); 64 in flight is what many turns at once could share if their records were batched.
Two clients side by side: aiokafka (pure Python, what the roles use) and confluent-kafka
(librdkafka, C).

    python -m bench.kafka_floor                       # the grid below, ~2 min
    python -m bench.kafka_floor --records 5000 --in-flight 1,64 --groups 1,3

Writes bench/results/kafka-floor.json and a plot (bench/figures/kafka-floor.png).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.namespace import drop_namespace
from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from runtime.settings import Settings

PARTITIONS = 8


@dataclass(frozen=True, slots=True)
class Cost:
    """CPU microseconds per record of one live run: this process (producer and consumers)
    and the broker; records per second through it."""

    client_us: float
    broker_us: float
    records_per_s: float


def broker_process(home: Path) -> psutil.Process | None:
    try:
        return psutil.Process(int((home / "run" / "kafka.pid").read_text().strip()))
    except (OSError, ValueError, psutil.Error):
        return None


def _cpu(process: psutil.Process | None) -> float:
    if process is None:
        return 0.0
    t = process.cpu_times()
    return t.user + t.system


async def measured(
    run: Callable[[], Awaitable[None]], records: int, broker: psutil.Process | None
) -> Cost:
    me = psutil.Process(os.getpid())
    client0, broker0, wall0 = _cpu(me), _cpu(broker), time.perf_counter()
    await run()
    client1, broker1, wall1 = _cpu(me), _cpu(broker), time.perf_counter()
    return Cost(
        client_us=(client1 - client0) / records * 1e6,
        broker_us=(broker1 - broker0) / records * 1e6,
        records_per_s=records / (wall1 - wall0),
    )


# ---------------------------------------------------------------------------- aiokafka


class AiokafkaSide:
    name = "aiokafka"

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.producer: AIOKafkaProducer | None = None
        self.consumers: list[AIOKafkaConsumer] = []

    async def start(self, groups: int) -> None:
        """Producer connected, consumers assigned at the end: nothing joins inside the run."""
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=False, linger_ms=0
        )
        await self.producer.start()
        for p in range(PARTITIONS):  # every partition's leader known before the run
            await self.producer.send_and_wait(self.topic, b"", partition=p)
        for _ in range(groups):
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=f"floor-{uuid.uuid4().hex[:6]}",
                enable_auto_commit=False,
                fetch_max_wait_ms=500,
            )
            await consumer.start()
            parts = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
            consumer.assign(parts)
            await consumer.seek_to_end(*parts)
            for tp in parts:
                await consumer.position(tp)
            self.consumers.append(consumer)

    async def run(self, n: int, size: int, in_flight: int) -> None:
        assert self.producer is not None
        producer, value = self.producer, b"x" * size

        async def sender(first: int) -> None:
            for i in range(first, n, in_flight):  # one send outstanding per sender
                await producer.send_and_wait(self.topic, value, key=str(i % 997).encode())

        async def reader(consumer: AIOKafkaConsumer) -> None:
            seen = 0
            while seen < n:
                batches = await consumer.getmany(timeout_ms=1000, max_records=500)
                seen += sum(len(records) for records in batches.values())
                if batches:
                    await consumer.commit()

        readers = [asyncio.create_task(reader(c)) for c in self.consumers]
        await asyncio.gather(*(sender(k) for k in range(in_flight)))
        await asyncio.gather(*readers)

    async def stop(self) -> None:
        for consumer in self.consumers:
            await consumer.stop()
        if self.producer is not None:
            await self.producer.stop()


# ---------------------------------------------------------------------------- librdkafka


class ConfluentSide:
    name = "confluent-kafka"

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.producer = None
        self.consumers: list = []

    async def start(self, groups: int) -> None:
        from confluent_kafka import OFFSET_END, Consumer, Producer
        from confluent_kafka import TopicPartition as Part

        self.producer = Producer(
            {"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0,
             "enable.idempotence": False}
        )  # fmt: skip
        for p in range(PARTITIONS):  # connected, every leader known, before the run
            self.producer.produce(self.topic, b"", partition=p)
        self.producer.flush(10)
        for _ in range(groups):
            consumer = Consumer(
                {"bootstrap.servers": self.bootstrap, "group.id": f"floor-{uuid.uuid4().hex[:6]}",
                 "enable.auto.commit": False, "fetch.wait.max.ms": 500}
            )  # fmt: skip
            consumer.assign([Part(self.topic, p, OFFSET_END) for p in range(PARTITIONS)])
            consumer.consume(num_messages=1, timeout=1.0)  # fetches started at the end
            self.consumers.append(consumer)

    async def run(self, n: int, size: int, in_flight: int) -> None:
        producer, value = self.producer, b"x" * size
        assert producer is not None

        def produce() -> None:
            outstanding = 0

            def delivered(err, _msg) -> None:
                nonlocal outstanding
                outstanding -= 1
                if err is not None:
                    raise RuntimeError(f"delivery failed: {err}")

            for i in range(n):
                while outstanding >= in_flight:  # as many outstanding as the aiokafka side
                    producer.poll(0.05)
                outstanding += 1
                producer.produce(
                    self.topic, value, key=str(i % 997).encode(), on_delivery=delivered
                )
                producer.poll(0)
            producer.flush(30)

        def read(consumer) -> None:
            seen = 0
            while seen < n:
                records = consumer.consume(num_messages=500, timeout=1.0)
                seen += sum(1 for r in records if r.error() is None)
                if records:
                    consumer.commit(asynchronous=False)

        readers = [asyncio.to_thread(read, c) for c in self.consumers]
        await asyncio.gather(asyncio.to_thread(produce), *readers)

    async def stop(self) -> None:
        for consumer in self.consumers:
            consumer.close()
        if self.producer is not None:
            self.producer.flush(10)


SIDES = (AiokafkaSide, ConfluentSide)


# ---------------------------------------------------------------------------- the run


async def create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        for _ in range(100):  # until every partition has a leader
            described = await admin.describe_topics([topic])
            partitions = described[0].get("partitions", [])
            if len(partitions) == PARTITIONS and all(p["leader"] >= 0 for p in partitions):
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(percentile(values, 50), 2),
        "low": round(min(values), 2),
        "high": round(max(values), 2),
    }


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


async def run(args: argparse.Namespace) -> dict:
    settings = Settings.from_env(namespace=f"floor-{uuid.uuid4().hex[:6]}")
    broker = broker_process(Path(settings.state_path))
    if broker is None:
        print("note: no broker pid file; the broker's share is not measured", file=sys.stderr)
    cases = [(f, g) for f in _ints(args.in_flight) for g in _ints(args.groups)]
    costs: dict[str, list[Cost]] = {}
    topics = 0
    try:
        for repeat in range(args.repeats):
            for in_flight, groups in cases:
                for side_type in SIDES:  # interleaved: both clients share the box's drift
                    topics += 1
                    topic = f"{settings.namespace}.t{topics}"
                    await create_topic(settings.kafka_bootstrap, topic)
                    side = side_type(settings.kafka_bootstrap, topic)
                    await side.start(groups)
                    try:
                        work = functools.partial(side.run, args.records, args.bytes, in_flight)
                        cost = await measured(work, args.records, broker)
                    finally:
                        await side.stop()
                    key = f"{side.name} | in flight {in_flight} | groups {groups}"
                    costs.setdefault(key, []).append(cost)
                    print(
                        f"  repeat {repeat + 1}/{args.repeats}  {key:40s} client "
                        f"{cost.client_us:6.1f} µs, broker {cost.broker_us:6.1f} µs per record "
                        f"({cost.records_per_s:,.0f} records/s)",
                        flush=True,
                    )
    finally:
        await drop_namespace(settings)
    return {
        "command": " ".join(["python -m bench.kafka_floor", *sys.argv[1:]]),
        "at": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
        "records": args.records,
        "bytes": args.bytes,
        "repeats": args.repeats,
        "us_per_record": {
            key: {
                "client": spread([c.client_us for c in runs]),
                "broker": spread([c.broker_us for c in runs]),
                "records_per_s": spread([c.records_per_s for c in runs]),
            }
            for key, runs in costs.items()
        },
    }


def print_report(result: dict) -> None:
    print(
        f"\nCPU µs per record produced and read live, median [low..high] of "
        f"{result['repeats']} repeats ({result['records']} records of {result['bytes']} B)"
    )
    for key, cost in result["us_per_record"].items():
        c, b = cost["client"], cost["broker"]
        print(
            f"  {key:40s} client {c['median']:7.1f} [{c['low']:.1f}..{c['high']:.1f}]"
            f"  broker {b['median']:6.1f} [{b['low']:.1f}..{b['high']:.1f}]"
            f"  {cost['records_per_s']['median']:8.0f} records/s"
        )


def plot(result: dict) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    keys = list(result["us_per_record"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = range(len(keys))
    for offset, side in ((-0.2, "client"), (0.2, "broker")):
        med = [result["us_per_record"][k][side]["median"] for k in keys]
        low = [m - result["us_per_record"][k][side]["low"] for m, k in zip(med, keys, strict=True)]
        high = [
            result["us_per_record"][k][side]["high"] - m for m, k in zip(med, keys, strict=True)
        ]
        ax.bar([i + offset for i in x], med, 0.4, yerr=[low, high], capsize=3, label=side)
    ax.set_xticks(list(x), [k.replace(" | ", "\n") for k in keys], fontsize=6)
    ax.set_ylabel("CPU µs per record")
    ax.legend()
    ax.set_title(f"One Kafka record, produced and read live ({result['at']}, {result['bytes']} B)")
    fig.tight_layout()
    return save_figure(fig, "kafka-floor")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.kafka_floor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--bytes", type=int, default=2300, help="a turn's records average ~2.3 kB")
    parser.add_argument("--in-flight", default="1,64", help="sends outstanding at once, a list")
    parser.add_argument("--groups", default="1,3", help="consumer groups reading, a list")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print_report(result)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "kafka-floor.json"
    path.write_text(json.dumps(result, indent=2))
    figure = plot(result)
    print(f"\nwrote {path}" + (f" and {figure}" if figure else ""))


if __name__ == "__main__":
    main()

"""How fast the ClickHouse sink drains `turns.completed`, and how soon a turn is queryable.

(1) Throughput: N completed turns are already in Kafka; the sink (in-process, embedded
    ClickHouse) drains them: rows/s. Baseline in the same run: the same rows inserted
    straight into ClickHouse in the same batch size (no Kafka, no decoding): the ratio is
    what the sink's consume/decode/check/commit path costs.
(2) Visibility lag at increasing steady rates: turns are produced at R rows/s while the sink
    runs; lag = insert acknowledged (the row is queryable) minus the turn's `completed_at`.

    python -m bench.sink                         # 100k rows; rates 1k, 5k, 20k rows/s
    python -m bench.sink --rows 200000 --rates 2000,10000,40000

Prints rows/s, the ratio, lag p50/p99 per rate; writes bench/results/sink.{json,png} and
copies the figure to bench/figures/sink.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
import uuid

from aiokafka import AIOKafkaProducer

from bench.stats import summary
from harness.factories import completed
from harness.polling import eventually
from infra.stack import REPO
from runtime.clickhouse.client import connect
from runtime.clickhouse.migrate import migrate
from runtime.kafka_topics import ensure_topics
from runtime.settings import Settings
from schemas.codec import encode
from schemas.ids import now_ms
from workers.sink.app import TURNS, run_sink
from workers.sink.rows import turn_row
from workers.sink.service import SOURCE_COLUMNS

RESULTS = REPO / "bench" / "results"
FIGURES = REPO / "bench" / "figures"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def turn_payload(i: int, stamp_ms: float, run: str) -> bytes:
    return encode(completed(f"{run}-{i}", tenant_id=f"t{i % 7}", completed_at_ms=stamp_ms))


async def produce(settings: Settings, payloads, rate: float | None = None) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, acks="all", linger_ms=5, max_batch_size=1 << 20
    )
    await producer.start()
    topic = f"{settings.namespace}.turns.completed"
    started = time.perf_counter()
    try:
        pending = []
        for n, make in enumerate(payloads):
            if rate is not None:
                delay = started + n / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            pending.append(await producer.send(topic, make(), key=str(n % 64).encode()))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def count(client, run: str) -> int:
    query = "SELECT count() FROM turnstream.turns WHERE turn_id LIKE %(p)s"
    return client.query(query, parameters={"p": f"{run}-%"}).result_rows[0][0]


async def wait_rows(client, run: str, expected: int) -> None:
    async def enough() -> bool:
        return await asyncio.to_thread(count, client, run) >= expected

    await eventually(enough, timeout_s=600, every_s=0.05)


async def throughput(base: Settings, client, rows: int, batch: int) -> dict:
    settings = Settings.from_env(
        namespace=f"bench-sink-{uuid.uuid4().hex[:6]}", sink_batch_rows=batch, sink_linger_ms=200
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    run = f"thr{uuid.uuid4().hex[:6]}"
    stamp = now_ms()
    progress(f"(1) producing {rows} turns")
    await produce(settings, (lambda i=i: turn_payload(i, stamp, run) for i in range(rows)))
    progress("(1) sink draining")
    started = time.perf_counter()
    async with run_sink(settings, client, ("turns",)):
        await wait_rows(client, run, rows)
    sink_s = time.perf_counter() - started
    progress("(1) baseline: the same rows inserted directly")
    direct_run = f"dir{uuid.uuid4().hex[:6]}"
    events = [completed(f"{direct_run}-{i}", completed_at_ms=stamp) for i in range(rows)]
    started = time.perf_counter()
    for start in range(0, rows, batch):
        chunk = [  # the same columns the sink writes, source coordinates included
            (*turn_row(e, now_ms=now_ms()), "direct", 0, start + i)
            for i, e in enumerate(events[start : start + batch])
        ]
        columns = [*TURNS.columns, *SOURCE_COLUMNS]
        await asyncio.to_thread(client.insert, TURNS.table, chunk, column_names=columns)
    direct_s = time.perf_counter() - started
    return {
        "rows": rows,
        "batch_rows": batch,
        "sink_rows_per_s": rows / sink_s,
        "direct_rows_per_s": rows / direct_s,
        "ratio_sink_to_direct": (rows / sink_s) / (rows / direct_s),
    }


async def lag_at(client, rate: float, seconds: float) -> dict:
    settings = Settings.from_env(
        namespace=f"bench-lag-{uuid.uuid4().hex[:6]}", sink_batch_rows=5000, sink_linger_ms=200
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    run = f"lag{uuid.uuid4().hex[:6]}"
    rows = int(rate * seconds)
    async with run_sink(settings, client, ("turns",)) as sinks:
        sink = sinks["turns"]
        await asyncio.sleep(1.0)  # joined and assigned
        await produce(
            settings, (lambda i=i: turn_payload(i, now_ms(), run) for i in range(rows)), rate
        )
        await wait_rows(client, run, rows)
    return {"rate": rate, "rows": rows, "lag_ms": summary(list(sink.stats.lag_ms))}


def plot(results: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    t = results["throughput"]
    left.bar(
        ["sink (Kafka → CH)", "direct inserts"], [t["sink_rows_per_s"], t["direct_rows_per_s"]]
    )
    left.set_ylabel("rows per second")
    left.set_title(f"throughput, {t['rows']} rows, batches of {t['batch_rows']}")
    rates = [r["rate"] for r in results["lag"]]
    right.plot(rates, [r["lag_ms"]["p50"] for r in results["lag"]], "o-", label="p50")
    right.plot(rates, [r["lag_ms"]["p99"] for r in results["lag"]], "o-", label="p99")
    right.set_xscale("log")
    right.set_xlabel("turns completed per second")
    right.set_ylabel("completed → queryable (ms)")
    right.set_title("visibility lag")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--rates", default="1000,5000,20000")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    base = Settings.from_env()
    with tempfile.TemporaryDirectory() as home:
        client = connect(Settings.from_env(state_dir=home))
        migrate(client)
        results = {"throughput": await throughput(base, client, args.rows, args.batch), "lag": []}
        for rate in [float(r) for r in args.rates.split(",")]:
            progress(f"(2) lag at {rate:.0f} rows/s")
            results["lag"].append(await lag_at(client, rate, args.seconds))
    t = results["throughput"]
    print(
        f"throughput: sink {t['sink_rows_per_s']:.0f} rows/s, direct inserts "
        f"{t['direct_rows_per_s']:.0f} rows/s, ratio {t['ratio_sink_to_direct']:.2f}"
    )
    print(f"{'rate/s':>8} {'rows':>7} {'lag p50 ms':>11} {'lag p99 ms':>11} {'max':>8}")
    for r in results["lag"]:
        lag = r["lag_ms"]
        cells = f"{lag['p50']:>11.1f} {lag['p99']:>11.1f} {lag['max']:>8.1f}"
        print(f"{r['rate']:>8.0f} {r['rows']:>7} {cells}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sink.json").write_text(json.dumps(results, indent=1))
    plot(results, RESULTS / "sink.png")
    shutil.copy(RESULTS / "sink.png", FIGURES / "sink.png")
    print(f"wrote {RESULTS / 'sink.json'} and {FIGURES / 'sink.png'}")


if __name__ == "__main__":
    asyncio.run(main())

"""The analysts' views at scale: millions of realistic trace rows (and their events) in a
fresh embedded store, then every view and the documented example queries, timed.

    python -m bench.analytics_scale --rows 10000000 [--repeats 3] [--home DIR] [--keep]

Rows are made by the engine itself (INSERT ... SELECT FROM numbers()) in batches, with
distributions like live traffic: 30 days, a few heavy tenants and many light ones, three
models, TTFT lognormal, 1% errors, 2% replay rows, a 10% canary, spoken and tool turns,
typed turns in nine languages; three events per trace and a `speech.delivered` one per
spoken answer; the engines' samples of 30 days (16 workers, one every 500 ms as
TURNSTREAM_METRICS_INTERVAL_MS: 83M rows; `--metrics-workers 0` for none). Each query runs
once cold, then `repeats` times; the table gives the cold time, the warm median and max, and
the rows it answered. Writes bench/results/analytics_scale.json and a plot
(bench/figures/analytics_scale.png).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.plotting import RESULTS, save_figure
from runtime.clickhouse.client import connect
from runtime.clickhouse.migrate import migrate
from runtime.settings import Settings

BATCH = 1_000_000
DAY_S = 86_400

TRACES = """
INSERT INTO turnstream.traces
    (turn_id, conversation_id, tenant_id, user_id, client, status, model, worker_id, pool,
     intent, routing_strategy, tier, has_text, image_count, audio_count, prompt_tokens,
     completion_tokens, cached_prompt_tokens, history_messages, dropped_messages,
     preprocess_ms, queue_ms, ttft_ms, e2e_ms, itl_p50_ms, itl_p99_ms, itl_max_ms,
     finish_reason, error_code, input_safety, cost_usd, run_id, arm, language,
     language_source, tools_offered, tool_calls, tool_call_ids, edge_id, image_cache_hits,
     hop_preprocess_ms, hop_assembly_ms, hop_queue_ms, hop_prefill_ms, hop_decode_ms,
     hop_endpointing_ms, submitted_at, completed_at)
SELECT
    concat('t-', toString(n)) AS turn_id,
    concat('c-', toString(intDiv(n, 5))) AS conversation_id,
    concat('tenant-', toString(toUInt32(pow(rand(1) / 4294967295, 3) * 40))) AS tenant_id,
    concat('u-', toString(rand(2) % 200000)) AS user_id,
    ['web', 'ios', 'android', 'sdk'][1 + rand(3) % 4] AS client,
    if(rand(4) % 200 = 0, 'timed_out', 'completed') AS status,
    ['smollm2-135m', 'qwen3-8b', 'qwen3-32b-reasoning'][1 + rand(5) % 3] AS model,
    concat('worker-', toString(rand(6) % 16)) AS worker_id,
    if(rand(7) % 5 = 0, 'reasoning', 'chat') AS pool,
    ['chat', 'code', 'math', 'search'][1 + rand(8) % 4] AS intent,
    'prefix' AS routing_strategy,
    ['free', 'pro', 'enterprise'][1 + rand(9) % 3] AS tier,
    1 AS has_text,
    if(rand(10) % 20 = 0, 1, 0) AS image_count,
    if(rand(11) % 10 = 0, 1, 0) AS audio_count,
    toUInt32(200 + rand(12) % 3000) AS prompt_tokens,
    toUInt32(20 + rand(13) % 600) AS completion_tokens,
    toUInt32(rand(14) % 1500) AS cached_prompt_tokens,
    toUInt16(rand(15) % 40) AS history_messages,
    toUInt16(if(rand(16) % 10 = 0, 1 + rand(17) % 5, 0)) AS dropped_messages,
    toFloat32(2 + rand(18) % 30) AS preprocess_ms,
    toFloat32(10 + rand(19) % 80) AS queue_ms,
    toFloat32(queue_ms + exp(randNormal(4.5, 0.7))) AS ttft_ms,
    toFloat32(ttft_ms + completion_tokens * (15 + rand(20) % 20)) AS e2e_ms,
    toFloat32(15 + rand(21) % 20) AS itl_p50_ms,
    toFloat32(itl_p50_ms * 2.5) AS itl_p99_ms,
    toFloat32(itl_p99_ms * 1.5) AS itl_max_ms,
    multiIf(rand(22) % 100 = 0, 'error', rand(22) % 30 = 0, 'length',
            rand(22) % 40 = 0, 'cancelled', 'stop') AS finish_reason,
    if(finish_reason = 'error', 'engine_failed', '') AS error_code,
    if(rand(23) % 100 = 0, 'block', 'allow') AS input_safety,
    (prompt_tokens * 0.5 + completion_tokens * 1.5) / 1e6 AS cost_usd,
    if(rand(24) % 50 = 0, concat('run-', toString(rand(25) % 20)), '') AS run_id,
    multiIf(rand(26) % 20 = 0, 'terse', rand(26) % 20 = 1, 'control', '') AS arm,
    multiIf(audio_count > 0, ['en', 'es', 'zh', 'fr'][1 + rand(27) % 4],
            rand(27) % 40 = 0, '',
            ['en', 'en', 'en', 'es', 'de', 'fr', 'zh', 'ja', 'hi', 'ar', 'ru'][1 + rand(32) % 11])
        AS language,
    multiIf(audio_count > 0, 'speech', language != '', 'text', '') AS language_source,
    if(rand(28) % 25 = 0, 3, 0) AS tools_offered,
    if(tools_offered > 0 AND rand(29) % 2 = 0, ['calc__add'], []) AS tool_calls,
    arrayMap(name -> concat(turn_id, '/', name), tool_calls) AS tool_call_ids,
    concat('edge-', toString(rand(30) % 4)) AS edge_id,
    toUInt8(if(image_count > 0 AND rand(31) % 3 = 0, 1, 0)) AS image_cache_hits,
    preprocess_ms + 3 AS hop_preprocess_ms,
    toFloat32(5) AS hop_assembly_ms,
    queue_ms - hop_preprocess_ms - hop_assembly_ms AS hop_queue_ms,
    ttft_ms - queue_ms AS hop_prefill_ms,
    e2e_ms - ttft_ms AS hop_decode_ms,
    toFloat32(if(audio_count > 0, 150 + rand(33) % 700, 0)) AS hop_endpointing_ms,
    fromUnixTimestamp64Milli(toInt64({start_ms:Int64} + (n * {span_ms:Int64}) / {rows:Int64}))
        AS submitted_at,
    submitted_at + toIntervalMillisecond(toInt64(e2e_ms)) AS completed_at
FROM (SELECT number AS n FROM numbers({first:UInt64}, {count:UInt64}))
"""

EVENTS = """
INSERT INTO turnstream.events
    (kind, turn_id, conversation_id, tenant_id, user_id, at, step, actor, detail,
     error_code, text_bytes, payload, kafka_topic, kafka_partition, kafka_offset)
SELECT
    ['turn.submitted', 'turn.enriched', 'turn.completed'][k + 1] AS kind,
    turn_id, conversation_id, tenant_id, user_id,
    submitted_at + toIntervalMillisecond(
        [0, toInt64(hop_preprocess_ms), toInt64(e2e_ms)][k + 1]) AS at,
    toUInt8(k) AS step,
    ['edge-0', 'preprocess-0', worker_id][k + 1] AS actor,
    if(k = 2, finish_reason, '') AS detail,
    if(k = 2, error_code, '') AS error_code,
    toUInt32(if(k = 2, completion_tokens * 4, 120)) AS text_bytes,
    concat('{"type":"', kind, '","turn_id":"', turn_id, '","tenant_id":"', tenant_id,
           '","text":"', repeat('lorem ipsum ', 1 + rand(40) % 8), '"}') AS payload,
    concat('turnstream.', ['turns.submitted', 'turns.enriched', 'turns.completed'][k + 1])
        AS kafka_topic,
    toUInt16(cityHash64(conversation_id) % 8) AS kafka_partition,
    toUInt64(rowNumberInAllBlocks()) AS kafka_offset
FROM turnstream.traces
ARRAY JOIN [0, 1, 2] AS k
"""

# the edge's record of each spoken answer's first audio (what `speech_hops` joins)
SPEECH_EVENTS = """
INSERT INTO turnstream.events
    (kind, turn_id, conversation_id, tenant_id, user_id, at, step, actor, detail,
     error_code, text_bytes, payload, kafka_topic, kafka_partition, kafka_offset)
SELECT
    'speech.delivered' AS kind,
    turn_id, conversation_id, tenant_id, user_id,
    submitted_at + toIntervalMillisecond(toInt64(ttft_ms + 120 + rand(41) % 400)) AS at,
    toUInt8(50) AS step,
    edge_id AS actor,
    if(rand(42) % 8 = 0, 'interrupted', 'completed') AS detail,
    '' AS error_code,
    toUInt32(0) AS text_bytes,
    concat('{"type":"speech.delivered","turn_id":"', turn_id, '"}') AS payload,
    'turnstream.turns.completed' AS kafka_topic,
    toUInt16(cityHash64(conversation_id) % 8) AS kafka_partition,
    toUInt64(1e10 + rowNumberInAllBlocks()) AS kafka_offset
FROM turnstream.traces
WHERE audio_count > 0
"""

# the inference workers' samples, one day per statement
METRICS = """
INSERT INTO turnstream.worker_metrics
    (worker_id, pool, model, at, interval_ms, running, waiting, kv_cache_usage,
     prefix_cache_queries, prefix_cache_hits, preemptions, prompt_tokens, generation_tokens,
     queue_depth, in_flight, kafka_topic, kafka_partition, kafka_offset)
SELECT
    concat('worker-', toString(n % {workers:UInt64})) AS worker_id,
    if(n % {workers:UInt64} < {workers:UInt64} / 5, 'reasoning', 'chat') AS pool,
    ['smollm2-135m', 'qwen3-8b', 'qwen3-32b-reasoning'][1 + (n % {workers:UInt64}) % 3] AS model,
    fromUnixTimestamp64Milli(toInt64({start_ms:Int64}
        + intDiv(n, {workers:UInt64}) * {every_ms:UInt64})) AS at,
    toFloat32({every_ms:UInt64}) AS interval_ms,
    toUInt32(rand(50) % 48) AS running,
    toUInt32(if(rand(51) % 10 = 0, rand(52) % 20, 0)) AS waiting,
    toFloat32(running / 64 + (rand(53) % 100) / 1000) AS kv_cache_usage,
    toUInt32(rand(54) % 4000) AS prefix_cache_queries,
    toUInt32(prefix_cache_queries * (rand(55) % 80) / 100) AS prefix_cache_hits,
    toUInt32(if(rand(56) % 500 = 0, 1, 0)) AS preemptions,
    toUInt32(prefix_cache_queries - prefix_cache_hits) AS prompt_tokens,
    toUInt32(running * (5 + rand(57) % 15)) AS generation_tokens,
    toUInt32(rand(58) % 6) AS queue_depth,
    toUInt32(running + queue_depth) AS in_flight,
    'turnstream.workers.metrics' AS kafka_topic,
    toUInt16(n % 8) AS kafka_partition,
    n AS kafka_offset
FROM (SELECT number AS n FROM numbers({first:UInt64}, {count:UInt64}))
"""

# every view, and the example queries of docs/analytics.md and the migrations: a name,
# then its SQL indented below it
QUERY_LIST = """
app_hourly, last 6 h
    SELECT * FROM turnstream.app_hourly WHERE hour > now() - INTERVAL 6 HOUR ORDER BY hour
app_hourly, 7 days by model
    SELECT model, sum(turns), max(ttft_p99_ms) FROM turnstream.app_hourly
    WHERE hour > now() - INTERVAL 7 DAY GROUP BY model
app_hourly_all, replay runs
    SELECT run_id, sum(turns), avg(ttft_p50_ms) FROM turnstream.app_hourly_all
    WHERE run_id != '' AND hour > now() - INTERVAL 7 DAY GROUP BY run_id
business_daily, 30 days
    SELECT day, tenant_id, active_users, cost_usd FROM turnstream.business_daily
    ORDER BY day DESC
quality_daily, 30 days
    SELECT day, model, thumbs_up_ratio, regenerate_rate, abandon_rate
    FROM turnstream.quality_daily ORDER BY day
safety_daily, 30 days
    SELECT day, tenant_id, screened, blocked, block_rate FROM turnstream.safety_daily
    ORDER BY day
tool_calls by name
    SELECT name, count(), countIf(result_turn_id != ''), quantile(0.5)(client_ms)
    FROM turnstream.tool_calls GROUP BY name
turn_timeline of one turn
    SELECT kind, at, gap_ms, since_first_ms, detail
    FROM turnstream.turn_timeline(turn = 't-123457')
audited_traces, a day
    SELECT count() FROM turnstream.audited_traces
    WHERE submitted_at > now() - INTERVAL 1 DAY
one tenant's TTFT/ITL p99 by hour, a day
    SELECT toStartOfHour(submitted_at) AS hour, quantile(0.99)(ttft_ms),
    quantile(0.99)(itl_p99_ms) FROM turnstream.traces FINAL WHERE tenant_id = 'tenant-0'
    AND submitted_at > now() - INTERVAL 1 DAY GROUP BY hour ORDER BY hour
hops per pool, last hour
    SELECT pool, avg(hop_preprocess_ms), avg(hop_assembly_ms), avg(hop_queue_ms),
    avg(hop_prefill_ms), avg(hop_decode_ms), avg(e2e_ms) FROM turnstream.traces FINAL
    WHERE submitted_at > now() - INTERVAL 1 HOUR GROUP BY pool
TTFT p99 by edge, a day
    SELECT edge_id, count(), quantile(0.99)(ttft_ms) FROM turnstream.traces FINAL
    WHERE submitted_at > now() - INTERVAL 1 DAY GROUP BY edge_id
spoken turns by language, 7 days
    SELECT language, count() AS turns, quantile(0.5)(ttft_ms) FROM turnstream.traces FINAL
    WHERE audio_count > 0 AND submitted_at > now() - INTERVAL 7 DAY
    GROUP BY language ORDER BY turns DESC
model turns, a day (README)
    SELECT model, count() FROM turnstream.traces
    WHERE submitted_at > now() - INTERVAL 1 DAY GROUP BY model
a tenant's refused turns today (events)
    SELECT turn_id, kind, error_code, text_bytes FROM turnstream.events FINAL
    WHERE tenant_id = 'tenant-1' AND at >= today() AND error_code != '' ORDER BY at
one turn's events (events)
    SELECT kind, at, detail, error_code, text_bytes FROM turnstream.events FINAL
    WHERE turn_id = 't-777777' ORDER BY at, step
speech_hops by language, a day
    SELECT language, count(), quantile(0.5)(total_ms), quantile(0.9)(total_ms),
    avg(endpointing_ms), avg(transcript_ms), avg(first_token_ms), avg(first_audio_ms)
    FROM turnstream.speech_hops WHERE submitted_at > now() - INTERVAL 1 DAY GROUP BY language
typed turns by language, 7 days
    SELECT language_source, language, count() FROM turnstream.traces FINAL
    WHERE submitted_at > now() - INTERVAL 7 DAY GROUP BY language_source, language
    ORDER BY count() DESC
infra_minutely, last hour
    SELECT minute, worker_id, batch_avg, kv_usage_max, queue_depth_max
    FROM turnstream.infra_minutely WHERE minute > now() - INTERVAL 1 HOUR
    ORDER BY minute, worker_id
infra_minutely, a day per worker
    SELECT worker_id, max(kv_usage_max), avg(prefix_cache_hit_rate),
    sum(generation_tokens) FROM turnstream.infra_minutely
    WHERE minute > now() - INTERVAL 1 DAY GROUP BY worker_id
tokens per second per worker, last 10 minutes
    SELECT worker_id, sum(generation_tokens) / (sum(interval_ms) / 1000) AS tokens_per_s
    FROM turnstream.worker_metrics WHERE at > now() - INTERVAL 10 MINUTE GROUP BY worker_id
"""


def parse_queries(text: str) -> list[tuple[str, str]]:
    """(name, SQL) pairs of a list of names each followed by its indented SQL."""
    queries: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith(" "):
            queries[-1][1].append(line.strip())
        else:
            queries.append((line.strip(), []))
    return [(name, " ".join(sql)) for name, sql in queries]


QUERIES = parse_queries(QUERY_LIST)


@dataclass
class Timing:
    name: str
    cold_s: float
    warm_p50_s: float
    warm_max_s: float
    result_rows: int


@dataclass(frozen=True)
class Volume:
    traces: int
    events: int
    metrics: int


def generate(client, rows: int, with_events: bool, workers: int, every_ms: int) -> Volume:
    """The traces in batches of a million (progress on stderr), their events, then the
    workers' samples a day at a time."""
    end_ms = int(time.time() * 1000)
    start_ms = end_ms - 30 * DAY_S * 1000
    started = time.monotonic()
    for first in range(0, rows, BATCH):
        count = min(BATCH, rows - first)
        params = {
            "start_ms": start_ms,
            "span_ms": end_ms - start_ms,
            "rows": rows,
            "first": first,
            "count": count,
        }
        client.command(TRACES, parameters=params)
        done = first + count
        rate = done / max(time.monotonic() - started, 1e-9)
        print(f"\rgenerated {done:,}/{rows:,} traces ({rate:,.0f}/s)", end="", file=sys.stderr)
    print(file=sys.stderr)
    events = 0
    if with_events:
        print(f"generating {3 * rows:,} events (three per trace)…", file=sys.stderr)
        client.command(EVENTS)
        client.command(SPEECH_EVENTS)
        events = client.command("SELECT count() FROM turnstream.events")
    per_day = workers * (DAY_S * 1000 // every_ms) if workers else 0
    for day in range(30 if workers else 0):
        params = {
            "workers": workers,
            "every_ms": every_ms,
            "start_ms": start_ms,
            "first": day * per_day,
            "count": per_day,
        }
        client.command(METRICS, parameters=params)
        print(f"\rgenerated {(day + 1) * per_day:,} worker samples", end="", file=sys.stderr)
    if workers:
        print(file=sys.stderr)
    return Volume(rows, events, 30 * per_day)


def timed(client, name: str, sql: str, repeats: int) -> Timing:
    runs, result = [], 0
    for _ in range(1 + repeats):
        began = time.perf_counter()
        answer = client.query(sql)
        runs.append(time.perf_counter() - began)
        result = len(answer.result_rows)
    warm = runs[1:] or runs
    return Timing(name, runs[0], statistics.median(warm), max(warm), result)


def plot(timings: list[Timing], volume: Volume) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 0.42 * len(timings) + 1.5))
    names = [t.name for t in timings][::-1]
    ax.barh(names, [t.warm_p50_s for t in timings][::-1], color="#4c72b0", label="warm median")
    ax.scatter([t.cold_s for t in timings][::-1], names, color="#dd8452", zorder=3, label="cold")
    ax.axvline(1.0, color="red", linestyle="--", label="1 s")
    ax.set_xlabel("seconds")
    ax.set_title(
        f"analysts' queries, 2 cores: {volume.traces:,} traces,\n"
        f"{volume.events:,} events, {volume.metrics:,} worker samples"
    )
    ax.legend(loc="lower right")
    fig.tight_layout()
    return save_figure(fig, "analytics_scale")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.analytics_scale")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--home", default="", help="a fresh TURNSTREAM_HOME (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the generated store")
    parser.add_argument("--no-events", action="store_true")
    parser.add_argument("--metrics-workers", type=int, default=16, help="0: no worker samples")
    parser.add_argument("--metrics-every-ms", type=int, default=500)
    parser.add_argument(
        "--no-optimize",
        action="store_true",
        help="query the parts as inserted (default: merged first, as they are once merges ran)",
    )
    args = parser.parse_args(argv)
    home = Path(args.home or tempfile.mkdtemp(prefix="analytics-scale-"))
    client = connect(Settings.from_env(state_dir=str(home)))
    try:
        migrate(client)
        began = time.monotonic()
        volume = generate(
            client, args.rows, not args.no_events, args.metrics_workers, args.metrics_every_ms
        )
        generated_s = time.monotonic() - began
        if not args.no_optimize:  # as background merges leave a month, given time
            client.command("OPTIMIZE TABLE turnstream.traces FINAL")
        parts = client.command(
            "SELECT count() FROM system.parts WHERE database = 'turnstream' "
            "AND table = 'traces' AND active"
        )
        print(f"traces in {parts} parts", file=sys.stderr)
        timings = []
        for name, sql in QUERIES:
            timing = timed(client, name, sql, args.repeats)
            timings.append(timing)
            print(
                f"{timing.cold_s:7.3f} {timing.warm_p50_s:7.3f} {timing.warm_max_s:7.3f}  {name}",
                file=sys.stderr,
            )
    finally:
        client.close()
        if not args.keep and not args.home:
            shutil.rmtree(home, ignore_errors=True)
    print(
        f"\n{volume.traces:,} traces, {volume.events:,} events, {volume.metrics:,} worker "
        f"samples, generated in {generated_s:.0f} s; seconds per query:"
    )
    print(f"{'cold':>7} {'warm p50':>8} {'max':>7} {'rows':>6}  query")
    for t in timings:
        print(
            f"{t.cold_s:7.3f} {t.warm_p50_s:8.3f} {t.warm_max_s:7.3f} {t.result_rows:>6}  {t.name}"
        )
    slow = [t.name for t in timings if t.warm_p50_s >= 1.0]
    print(f"over 1 s (warm median): {', '.join(slow) if slow else 'none'}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "analytics_scale.json"
    out.write_text(
        json.dumps(
            {
                "rows": args.rows,
                "volume": asdict(volume),
                "generated_s": generated_s,
                "optimized": not args.no_optimize,
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "timings": [asdict(t) for t in timings],
            },
            indent=1,
        )
    )
    print(f"{out}\n{plot(timings, volume)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

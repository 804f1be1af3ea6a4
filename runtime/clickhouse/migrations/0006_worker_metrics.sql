-- worker_metrics: the infrastructure layer, one row per sample an inference worker publishes
-- to Kafka `workers.metrics` (every TURNSTREAM_METRICS_INTERVAL_MS, 500 ms by default).
--   who: worker_id (one worker process), pool (its role: inference), model (served name)
--   when: at (the sample's time); interval_ms (the time its counters cover; longer than the
--         setting when samples were skipped while Kafka did not answer)
--   engine gauges, as of `at`: running (requests in the decode batch: the batch size),
--         waiting (requests the engine has not scheduled yet), kv_cache_usage (0..1 of the
--         KV-cache blocks in use)
--   engine counters over the interval: prefix_cache_queries (prompt tokens looked up in the
--         prefix cache), prefix_cache_hits (found there), preemptions, prompt_tokens
--         (prefilled, i.e. computed, not served from the cache), generation_tokens
--   worker gauges: queue_depth (turns taken from Kafka, not yet in the engine: behind an
--         earlier turn of their conversation, loading pixels, waiting for the image budget),
--         in_flight (turns held: queued, generating or being recorded)
-- Ordered for "one worker over time"; one partition per day, rows kept 30 days.
--   SELECT toStartOfFiveMinutes(at) AS t, avg(kv_cache_usage), max(queue_depth)
--   FROM {db}.worker_metrics WHERE worker_id = 'inference-1a2b' AND at > now() - INTERVAL 1 HOUR
--   GROUP BY t ORDER BY t
--   -- generation throughput per worker over the last 10 minutes (tokens/s):
--   SELECT worker_id, sum(generation_tokens) / (sum(interval_ms) / 1000) AS tokens_per_s
--   FROM {db}.worker_metrics WHERE at > now() - INTERVAL 10 MINUTE GROUP BY worker_id
CREATE TABLE IF NOT EXISTS {db}.worker_metrics
(
    worker_id            LowCardinality(String),
    pool                 LowCardinality(String),
    model                LowCardinality(String),
    at                   DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    interval_ms          Float32 CODEC(Gorilla, ZSTD(1)),
    running              UInt32 CODEC(T64, ZSTD(1)),
    waiting              UInt32 CODEC(T64, ZSTD(1)),
    kv_cache_usage       Float32 CODEC(Gorilla, ZSTD(1)),
    prefix_cache_queries UInt32 CODEC(T64, ZSTD(1)),
    prefix_cache_hits    UInt32 CODEC(T64, ZSTD(1)),
    preemptions          UInt32 CODEC(T64, ZSTD(1)),
    prompt_tokens        UInt32 CODEC(T64, ZSTD(1)),
    generation_tokens    UInt32 CODEC(T64, ZSTD(1)),
    queue_depth          UInt32 CODEC(T64, ZSTD(1)),
    in_flight            UInt32 CODEC(T64, ZSTD(1)),
    -- the Kafka record the row came from (the sink's crash recovery, see 0005)
    kafka_topic          LowCardinality(String),
    kafka_partition      UInt16,
    kafka_offset         UInt64 CODEC(Delta, ZSTD(1)),
    INDEX kafka_offset_idx kafka_offset TYPE minmax GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(at)
ORDER BY (worker_id, at)
TTL toDateTime(at) + INTERVAL 30 DAY;

-- The sink retries an insert with the same insert_deduplication_token (see 0003).
ALTER TABLE {db}.worker_metrics MODIFY SETTING non_replicated_deduplication_window = 10000;

-- Infrastructure layer, per minute and worker: batch size, KV-cache usage, queue depth and
-- engine waiting (average and peak of the samples), the prefix-cache hit rate (hits over
-- lookups in the minute; NULL without lookups), preemptions and token throughput.
--   SELECT minute, worker_id, batch_avg, kv_usage_max, queue_depth_max
--   FROM {db}.infra_minutely WHERE minute > now() - INTERVAL 1 HOUR ORDER BY minute, worker_id
CREATE VIEW IF NOT EXISTS {db}.infra_minutely AS
SELECT
    toStartOfMinute(at) AS minute,
    worker_id,
    pool,
    model,
    count() AS samples,
    avg(running) AS batch_avg,
    max(running) AS batch_max,
    avg(kv_cache_usage) AS kv_usage_avg,
    max(kv_cache_usage) AS kv_usage_max,
    avg(queue_depth) AS queue_depth_avg,
    max(queue_depth) AS queue_depth_max,
    avg(waiting) AS waiting_avg,
    max(waiting) AS waiting_max,
    max(in_flight) AS in_flight_max,
    sum(prefix_cache_queries) AS prefix_cache_queries,
    sum(prefix_cache_hits) AS prefix_cache_hits,
    prefix_cache_hits / nullIf(prefix_cache_queries, 0) AS prefix_cache_hit_rate,
    sum(preemptions) AS preemptions,
    sum(prompt_tokens) AS prompt_tokens,
    sum(generation_tokens) AS generation_tokens,
    generation_tokens / nullIf(sum(interval_ms) / 1000, 0) AS generation_tokens_per_s
FROM {db}.worker_metrics
GROUP BY minute, worker_id, pool, model;

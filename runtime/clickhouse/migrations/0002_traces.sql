-- traces: one row per turn, joined from its events (schemas/traces.py builds it).
--   ids: turn_id, conversation_id, tenant_id (low cardinality), user_id; client = User-Agent
--   status: completed | timed_out (no turn.completed arrived in time)
--   modality: has_text, image_count, audio_count
--   tokens: prompt / completion / cached prompt tokens (the engine's counts)
--   context: history_messages kept, dropped_messages (truncation > 0), retrieved passage ids,
--            profile_used
--   latency (ms): preprocess_ms (the preprocessing worker's own time), queue_ms (accepted at
--            the edge → generation started), ttft_ms (accepted → first token; NULL when none),
--            e2e_ms, itl_p50/p99/max_ms and the whole gap array itl_ms
--   outcome: finish_reason (stop | length | cancelled | error), error_code, cost_usd (estimate)
-- Re-inserting a turn replaces it (ReplacingMergeTree on the sort key, latest completed_at
-- wins); query with FINAL, or argMax, when exact counts matter. Ordered for the common
-- questions: one tenant over a time range.
--   SELECT toStartOfHour(submitted_at) AS hour, quantile(0.99)(ttft_ms) AS ttft_p99,
--          quantile(0.99)(itl_p99_ms) AS itl_p99
--   FROM {db}.traces FINAL WHERE tenant_id = 'acme' AND submitted_at > now() - INTERVAL 1 DAY
--   GROUP BY hour ORDER BY hour
CREATE TABLE IF NOT EXISTS {db}.traces
(
    turn_id             String,
    conversation_id     String,
    tenant_id           LowCardinality(String),
    user_id             String,
    client              LowCardinality(String),
    status              LowCardinality(String),
    model               LowCardinality(String),
    worker_id           LowCardinality(String),
    has_text            UInt8,
    image_count         UInt8,
    audio_count         UInt8,
    prompt_tokens       UInt32,
    completion_tokens   UInt32,
    cached_prompt_tokens UInt32,
    history_messages    UInt16,
    dropped_messages    UInt16,
    retrieved           Array(String),
    profile_used        UInt8,
    preprocess_ms       Float32,
    queue_ms            Float32,
    ttft_ms             Nullable(Float32),
    e2e_ms              Float32,
    itl_p50_ms          Float32,
    itl_p99_ms          Float32,
    itl_max_ms          Float32,
    itl_ms              Array(Float32) CODEC(ZSTD(3)),
    finish_reason       LowCardinality(String),
    error_code          LowCardinality(String),
    cost_usd            Float64,
    submitted_at        DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1)),
    completed_at        DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1))
)
ENGINE = ReplacingMergeTree(completed_at)
PARTITION BY toYYYYMM(submitted_at)
ORDER BY (tenant_id, toDate(submitted_at), turn_id)
TTL toDateTime(submitted_at) + INTERVAL 400 DAY;

-- Application layer, hourly: latency percentiles, throughput, context overflow (truncation)
-- and error rates, per tenant and model.
--   SELECT * FROM {db}.app_hourly WHERE hour > now() - INTERVAL 6 HOUR ORDER BY hour
CREATE VIEW IF NOT EXISTS {db}.app_hourly AS
SELECT
    toStartOfHour(submitted_at) AS hour,
    tenant_id,
    model,
    count() AS turns,
    sum(completion_tokens) AS completion_tokens,
    quantile(0.5)(ttft_ms) AS ttft_p50_ms,
    quantile(0.99)(ttft_ms) AS ttft_p99_ms,
    quantile(0.5)(itl_p50_ms) AS itl_p50_ms,
    quantile(0.99)(itl_p99_ms) AS itl_p99_ms,
    quantile(0.5)(e2e_ms) AS e2e_p50_ms,
    quantile(0.99)(e2e_ms) AS e2e_p99_ms,
    avg(dropped_messages > 0) AS context_overflow_rate,
    avg(finish_reason = 'error') AS error_rate,
    avg(status = 'timed_out') AS timeout_rate
FROM {db}.traces FINAL
GROUP BY hour, tenant_id, model;

-- Business layer, daily: active users, tokens and estimated cost per tenant.
--   SELECT day, tenant_id, active_users, cost_usd FROM {db}.business_daily ORDER BY day DESC
CREATE VIEW IF NOT EXISTS {db}.business_daily AS
SELECT
    toDate(submitted_at) AS day,
    tenant_id,
    uniqExact(user_id) AS active_users,
    count() AS turns,
    sum(prompt_tokens) AS prompt_tokens,
    sum(completion_tokens) AS completion_tokens,
    sum(cost_usd) AS cost_usd
FROM {db}.traces FINAL
GROUP BY day, tenant_id;

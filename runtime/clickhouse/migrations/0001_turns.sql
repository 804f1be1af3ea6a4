-- One row per finished turn, written from Kafka `turns.completed`.
-- The wide trace table of the traces issue builds on this; analysts can already ask:
--   SELECT model, quantile(0.99)(ttft_ms) FROM {db}.turns WHERE completed_at > now() - INTERVAL 1 DAY GROUP BY model
CREATE TABLE IF NOT EXISTS {db}.turns
(
    turn_id             String,
    conversation_id     String,
    tenant_id           LowCardinality(String),
    user_id             String,
    model               LowCardinality(String),
    worker_id           LowCardinality(String),
    finish_reason       LowCardinality(String),
    error_code          LowCardinality(String),
    prompt_tokens       UInt32,
    completion_tokens   UInt32,
    cached_prompt_tokens UInt32,
    queue_ms            Float32,
    ttft_ms             Nullable(Float32),
    e2e_ms              Float32,
    itl_ms              Array(Float32) CODEC(ZSTD(3)),
    text                String CODEC(ZSTD(3)),
    completed_at        DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1))
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(completed_at)
ORDER BY (tenant_id, completed_at, turn_id)
TTL toDateTime(completed_at) + INTERVAL 180 DAY;

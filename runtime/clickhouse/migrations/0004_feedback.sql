-- feedback: what users said or did about an answer, one row per action (the sink writes it
-- from Kafka `feedback`). kind: thumbs_up | thumbs_down | regenerate | stop | copy_code | abandon.
--   SELECT kind, count() FROM {db}.feedback FINAL WHERE tenant_id = 'acme'
--     AND given_at > now() - INTERVAL 7 DAY GROUP BY kind
CREATE TABLE IF NOT EXISTS {db}.feedback
(
    turn_id         String,
    conversation_id String,
    tenant_id       LowCardinality(String),
    user_id         String,
    kind            LowCardinality(String),
    comment         String CODEC(ZSTD(3)),
    given_at        DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1))
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(given_at)
ORDER BY (tenant_id, turn_id, kind, given_at)
TTL toDateTime(given_at) + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- Quality layer, daily per tenant and model: thumbs-up share of rated turns, and the share
-- of turns regenerated, stopped (by the user: feedback or a cancelled answer), abandoned,
-- or whose code was copied.
--   SELECT day, model, thumbs_up_ratio, regenerate_rate FROM {db}.quality_daily ORDER BY day
CREATE VIEW IF NOT EXISTS {db}.quality_daily AS
SELECT
    toDate(t.submitted_at) AS day,
    t.tenant_id AS tenant_id,
    t.model AS model,
    count() AS turns,
    countIf(f.up > 0) AS thumbs_up,
    countIf(f.down > 0) AS thumbs_down,
    thumbs_up / nullIf(thumbs_up + thumbs_down, 0) AS thumbs_up_ratio,
    avg(f.regenerate > 0) AS regenerate_rate,
    avg(f.stop > 0 OR t.finish_reason = 'cancelled') AS stop_rate,
    avg(f.abandon > 0) AS abandon_rate,
    avg(f.copy_code > 0) AS copy_code_rate
FROM {db}.traces AS t FINAL
LEFT JOIN
(
    SELECT
        turn_id,
        countIf(kind = 'thumbs_up') AS up,
        countIf(kind = 'thumbs_down') AS down,
        countIf(kind = 'regenerate') AS regenerate,
        countIf(kind = 'stop') AS stop,
        countIf(kind = 'abandon') AS abandon,
        countIf(kind = 'copy_code') AS copy_code
    FROM {db}.feedback FINAL
    GROUP BY turn_id
) AS f USING (turn_id)
GROUP BY day, tenant_id, model;

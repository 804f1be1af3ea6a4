-- Where a turn went and where its time went (schemas/traces.py `latency_hops`): the edge
-- node that accepted it, how many of its images the preprocessing cache held, and its
-- end-to-end time cut into five hops that add up to e2e_ms (accepted → out of
-- preprocessing, its ASR for a spoken turn → assembled → its engine started → first token →
-- last token). Means add up too, so an hour's average turn splits exactly:
--   SELECT pool, avg(hop_preprocess_ms), avg(hop_assembly_ms), avg(hop_queue_ms),
--          avg(hop_prefill_ms), avg(hop_decode_ms), avg(e2e_ms)
--   FROM {db}.traces FINAL WHERE submitted_at > now() - INTERVAL 1 HOUR GROUP BY pool
--   -- which edge served the slowest turns
--   SELECT edge_id, count(), quantile(0.99)(ttft_ms) FROM {db}.traces FINAL GROUP BY edge_id
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS edge_id LowCardinality(String) DEFAULT '' AFTER continued_by,
    ADD COLUMN IF NOT EXISTS image_cache_hits UInt8 DEFAULT 0 AFTER edge_id,
    ADD COLUMN IF NOT EXISTS hop_preprocess_ms Float32 DEFAULT 0 AFTER image_cache_hits,
    ADD COLUMN IF NOT EXISTS hop_assembly_ms Float32 DEFAULT 0 AFTER hop_preprocess_ms,
    ADD COLUMN IF NOT EXISTS hop_queue_ms Float32 DEFAULT 0 AFTER hop_assembly_ms,
    ADD COLUMN IF NOT EXISTS hop_prefill_ms Float32 DEFAULT 0 AFTER hop_queue_ms,
    ADD COLUMN IF NOT EXISTS hop_decode_ms Float32 DEFAULT 0 AFTER hop_prefill_ms;

-- Abandonment the edge inferred (a client left during an answer and resumed none of it
-- within TURNSTREAM_ABANDON_WINDOW_S: ws_edge/abandonment.py) is `abandon` feedback with
-- inferred = 1; what clients send themselves has 0:
--   SELECT inferred, count() FROM {db}.feedback FINAL WHERE kind = 'abandon' GROUP BY inferred
ALTER TABLE {db}.feedback
    ADD COLUMN IF NOT EXISTS inferred UInt8 DEFAULT 0 AFTER given_at;

-- Every view below reads FINAL one partition at a time (a turn's rows share its month:
-- the partition key is in the sort key), so a month already merged is read without merging:
-- 0.94 → 0.13 s for app_hourly's last 6 h on 10M traces.
-- The live views count live traffic only: not replay runs (run_id != '') nor a canary's
-- candidate arm (arm other than '' or 'control'). Their `_all` twins count everything,
-- with run_id and arm as columns, for whoever asks:
--   SELECT hour, run_id, arm, turns, ttft_p99_ms FROM {db}.app_hourly_all
--   WHERE run_id != '' ORDER BY hour
CREATE OR REPLACE VIEW {db}.app_hourly_all AS
SELECT
    toStartOfHour(submitted_at) AS hour,
    tenant_id,
    model,
    run_id,
    arm,
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
    avg(status = 'timed_out') AS timeout_rate,
    avg(hop_preprocess_ms) AS hop_preprocess_ms,
    avg(hop_assembly_ms) AS hop_assembly_ms,
    avg(hop_queue_ms) AS hop_queue_ms,
    avg(hop_prefill_ms) AS hop_prefill_ms,
    avg(hop_decode_ms) AS hop_decode_ms,
    avg(e2e_ms) AS e2e_avg_ms
FROM {db}.traces FINAL
GROUP BY hour, tenant_id, model, run_id, arm
SETTINGS do_not_merge_across_partitions_select_final = 1;

CREATE OR REPLACE VIEW {db}.app_hourly AS
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
    avg(status = 'timed_out') AS timeout_rate,
    avg(hop_preprocess_ms) AS hop_preprocess_ms,
    avg(hop_assembly_ms) AS hop_assembly_ms,
    avg(hop_queue_ms) AS hop_queue_ms,
    avg(hop_prefill_ms) AS hop_prefill_ms,
    avg(hop_decode_ms) AS hop_decode_ms,
    avg(e2e_ms) AS e2e_avg_ms
FROM {db}.traces FINAL
WHERE run_id = '' AND arm IN ('', 'control')
GROUP BY hour, tenant_id, model
SETTINGS do_not_merge_across_partitions_select_final = 1;

-- Active users per day need an exact distinct count over the day's turns, the costliest
-- part of business_daily (1.1 s on 10M traces, bench.analytics_scale): a rollup keeps each
-- day's users as a uniqExact state, filled by a materialized view as traces are inserted
-- (a re-inserted trace adds the same user again: the count is unchanged) and once here
-- from the traces already stored.
CREATE TABLE IF NOT EXISTS {db}.traces_daily_users
(
    day         Date,
    tenant_id   LowCardinality(String),
    run_id      LowCardinality(String),
    arm         LowCardinality(String),
    users       AggregateFunction(uniqExact, String)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (tenant_id, day, run_id, arm)
TTL day + INTERVAL 400 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.traces_daily_users_mv TO {db}.traces_daily_users AS
SELECT toDate(submitted_at) AS day, tenant_id, run_id, arm, uniqExactState(user_id) AS users
FROM {db}.traces
GROUP BY day, tenant_id, run_id, arm;

INSERT INTO {db}.traces_daily_users
SELECT toDate(submitted_at) AS day, tenant_id, run_id, arm, uniqExactState(user_id) AS users
FROM {db}.traces
GROUP BY day, tenant_id, run_id, arm;

CREATE OR REPLACE VIEW {db}.business_daily_all AS
SELECT s.day AS day, s.tenant_id AS tenant_id, s.run_id AS run_id, s.arm AS arm,
    u.active_users AS active_users, s.turns AS turns, s.prompt_tokens AS prompt_tokens,
    s.completion_tokens AS completion_tokens, s.cost_usd AS cost_usd
FROM
(
    SELECT toDate(submitted_at) AS day, tenant_id, run_id, arm, count() AS turns,
        sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens,
        sum(cost_usd) AS cost_usd
    FROM {db}.traces FINAL
    GROUP BY day, tenant_id, run_id, arm
) AS s
LEFT JOIN
(
    SELECT day, tenant_id, run_id, arm, uniqExactMerge(users) AS active_users
    FROM {db}.traces_daily_users
    GROUP BY day, tenant_id, run_id, arm
) AS u USING (day, tenant_id, run_id, arm)
SETTINGS do_not_merge_across_partitions_select_final = 1;

CREATE OR REPLACE VIEW {db}.business_daily AS
SELECT s.day AS day, s.tenant_id AS tenant_id, u.active_users AS active_users,
    s.turns AS turns, s.prompt_tokens AS prompt_tokens,
    s.completion_tokens AS completion_tokens, s.cost_usd AS cost_usd
FROM
(
    SELECT toDate(submitted_at) AS day, tenant_id, count() AS turns,
        sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens,
        sum(cost_usd) AS cost_usd
    FROM {db}.traces FINAL
    WHERE run_id = '' AND arm IN ('', 'control')
    GROUP BY day, tenant_id
) AS s
LEFT JOIN
(
    SELECT day, tenant_id, uniqExactMerge(users) AS active_users
    FROM {db}.traces_daily_users
    WHERE run_id = '' AND arm IN ('', 'control')
    GROUP BY day, tenant_id
) AS u USING (day, tenant_id)
SETTINGS do_not_merge_across_partitions_select_final = 1;

CREATE OR REPLACE VIEW {db}.quality_daily_all AS
SELECT
    toDate(t.submitted_at) AS day,
    t.tenant_id AS tenant_id,
    t.model AS model,
    t.run_id AS run_id,
    t.arm AS arm,
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
GROUP BY day, tenant_id, model, run_id, arm
SETTINGS do_not_merge_across_partitions_select_final = 1;

CREATE OR REPLACE VIEW {db}.quality_daily AS
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
WHERE t.run_id = '' AND t.arm IN ('', 'control')
GROUP BY day, tenant_id, model
SETTINGS do_not_merge_across_partitions_select_final = 1;

CREATE OR REPLACE VIEW {db}.safety_daily_all AS
SELECT
    toDate(submitted_at) AS day,
    tenant_id,
    run_id,
    arm,
    countIf(input_safety != '') AS screened,
    countIf(input_safety = 'block') AS blocked,
    blocked / nullIf(screened, 0) AS block_rate,
    countIf(length(safety_labels) > 0) AS flagged,
    quantileIf(0.5)(screen_ms, input_safety != '') AS screen_p50_ms,
    quantileIf(0.99)(screen_ms, input_safety != '') AS screen_p99_ms,
    countIf(safety_error != '') AS screen_errors,
    countIf(output_policy != '') AS answers_checked,
    countIf(cut_window >= 0) AS cut,
    sum(unaudited) AS unaudited,
    (blocked + cut) / count() AS trigger_rate
FROM {db}.traces FINAL
GROUP BY day, tenant_id, run_id, arm
SETTINGS do_not_merge_across_partitions_select_final = 1;

CREATE OR REPLACE VIEW {db}.safety_daily AS
SELECT
    toDate(submitted_at) AS day,
    tenant_id,
    countIf(input_safety != '') AS screened,
    countIf(input_safety = 'block') AS blocked,
    blocked / nullIf(screened, 0) AS block_rate,
    countIf(length(safety_labels) > 0) AS flagged,
    quantileIf(0.5)(screen_ms, input_safety != '') AS screen_p50_ms,
    quantileIf(0.99)(screen_ms, input_safety != '') AS screen_p99_ms,
    countIf(safety_error != '') AS screen_errors,
    countIf(output_policy != '') AS answers_checked,
    countIf(cut_window >= 0) AS cut,
    sum(unaudited) AS unaudited,
    (blocked + cut) / count() AS trigger_rate
FROM {db}.traces FINAL
WHERE run_id = '' AND arm IN ('', 'control')
GROUP BY day, tenant_id
SETTINGS do_not_merge_across_partitions_select_final = 1;

-- The events log (0007) also keeps every safety verdict: kind 'safety.verdict', detail
-- '<stage>:<action>[:labels]' (input:block:injection, output:cut:secret_leak), step 25 for the
-- input screen, 45 for output windows; error_code names a failed check; the payload holds
-- the refused text as evidence.
-- Input screening in the trace (workers/safety via the preprocessing worker):
--   input_safety: allow | block ('' when the turn was not screened: screening off)
--   safety_labels: what matched (injection, jailbreak, smuggling, profanity, abuse, hate,
--       self_harm, weapons, drugs, malware, secret_leak, blacklisted_user,
--       blacklisted_content); also set on allowed turns when a label below the blocking
--       bar matched
--   screen_ms: time the screen took; safety_error: a check that failed (the turn was
--       judged by the others)
-- Blocked turns end with finish_reason 'safety' and error_code 'input_blocked'.
--   SELECT arrayJoin(safety_labels) AS label, count() FROM {db}.traces FINAL
--   WHERE input_safety = 'block' AND submitted_at > now() - INTERVAL 1 DAY GROUP BY label
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS input_safety LowCardinality(String) AFTER error_code,
    ADD COLUMN IF NOT EXISTS safety_labels Array(LowCardinality(String)) AFTER input_safety,
    ADD COLUMN IF NOT EXISTS screen_ms Float32 AFTER safety_labels,
    ADD COLUMN IF NOT EXISTS safety_error LowCardinality(String) AFTER screen_ms;

-- The incremental output check of the answer (TURNSTREAM_SAFETY_OUTPUT_POLICY):
--   output_policy: optimistic | hold_back ('' when answers were not checked)
--   windows_checked: windows sent to the safety worker; cut_window: the window that was
--       cut (-1: none; the turn then has finish_reason 'safety', error_code 'output_cut')
--   unaudited: 1 when a verdict never came and optimistic mode went on without it
--   hold_max_ms: the longest time hold-back kept text from the user
--   SELECT output_policy, countIf(cut_window >= 0) AS cut, sum(unaudited) AS unaudited,
--          quantile(0.99)(hold_max_ms) FROM {db}.traces FINAL GROUP BY output_policy
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS output_policy LowCardinality(String) AFTER safety_error,
    ADD COLUMN IF NOT EXISTS windows_checked UInt16 AFTER output_policy,
    ADD COLUMN IF NOT EXISTS cut_window Int16 DEFAULT -1 AFTER windows_checked,
    ADD COLUMN IF NOT EXISTS unaudited UInt8 AFTER cut_window,
    ADD COLUMN IF NOT EXISTS hold_max_ms Float32 AFTER unaudited;

-- Safety layer, daily per tenant: turns screened and blocked, the block rate, screening
-- time and failures; answers checked while streaming, cut, and left unaudited. (The quality
-- layer's "safety trigger rate" is (blocked + cut) / turns.)
--   SELECT day, tenant_id, screened, blocked, block_rate FROM {db}.safety_daily ORDER BY day
CREATE VIEW IF NOT EXISTS {db}.safety_daily AS
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
GROUP BY day, tenant_id;

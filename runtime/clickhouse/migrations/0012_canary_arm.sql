-- Canary arms in the trace (schemas/canary.py, producers/flywheel/canary.py):
--   arm: the experiment arm of a live turn: 'control', the candidate's name, or '' when no
--       experiment ran. Arms are drawn per conversation.
--   SELECT arm, count(), quantile(0.99)(ttft_ms), avg(error_code != '')
--   FROM {db}.traces FINAL WHERE arm != '' AND submitted_at > now() - INTERVAL 1 DAY
--   GROUP BY arm
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS arm LowCardinality(String) AFTER run_id;

-- Replay runs in the trace (the data flywheel: producers/replay):
--   run_id: the replay run a turn belongs to ('' for live traffic). A replay plays recorded
--       turns or an eval set into an isolated namespace against a candidate configuration;
--       its traces land here beside live ones, told apart by run_id.
--   SELECT run_id, count(), avg(finish_reason = 'stop'), quantile(0.99)(e2e_ms)
--   FROM {db}.traces FINAL WHERE run_id != '' GROUP BY run_id
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS run_id LowCardinality(String) AFTER cost_usd;

-- The deployment's tools (workers/tools; docs/tools.md): how the tools worker ran each call
-- whose result a turn returned (aligned with tool_result_ids; '' / 0 where the client
-- returned it), the tool round (0: the user's turn; n: the n-th continuation) and the turn
-- an answer continued in. The view gains who ran each call, its outcome, how long it ran,
-- whether the books replayed it (a redelivery: not run again) and its idempotency key:
--   SELECT name, outcome, count() AS calls, countIf(replayed) AS replays,
--          quantile(0.5)(run_ms) AS run_p50_ms
--   FROM {db}.tool_calls WHERE executor = 'server' GROUP BY name, outcome
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS tool_result_outcomes Array(LowCardinality(String)) DEFAULT [] AFTER tool_result_ids,
    ADD COLUMN IF NOT EXISTS tool_result_ms Array(Float32) DEFAULT [] AFTER tool_result_outcomes,
    ADD COLUMN IF NOT EXISTS tool_result_replayed Array(UInt8) DEFAULT [] AFTER tool_result_ms,
    ADD COLUMN IF NOT EXISTS tool_result_keys Array(String) DEFAULT [] AFTER tool_result_replayed,
    ADD COLUMN IF NOT EXISTS tool_round UInt8 DEFAULT 0 AFTER tool_result_keys,
    ADD COLUMN IF NOT EXISTS continued_by String DEFAULT '' AFTER tool_round;

CREATE OR REPLACE VIEW {db}.tool_calls AS
SELECT
    c.turn_id AS turn_id,
    c.conversation_id AS conversation_id,
    c.tenant_id AS tenant_id,
    c.run_id AS run_id,
    c.name AS name,
    c.call_id AS call_id,
    c.finish_reason AS finish_reason,
    c.completed_at AS called_at,
    if(c.continued_by = '', 'client', 'server') AS executor,
    r.turn_id AS result_turn_id,
    if(r.turn_id = '', NULL, dateDiff('millisecond', c.completed_at, r.submitted_at)) AS client_ms,
    r.outcome AS outcome,
    r.run_ms AS run_ms,
    r.replayed AS replayed,
    r.idempotency_key AS idempotency_key
FROM
(
    SELECT turn_id, conversation_id, tenant_id, run_id, finish_reason, completed_at,
           continued_by, name, call_id
    FROM {db}.traces FINAL
    ARRAY JOIN tool_calls AS name, tool_call_ids AS call_id
) AS c
LEFT JOIN
(
    SELECT turn_id, submitted_at, result_id, outcome, run_ms, replayed, idempotency_key
    FROM {db}.traces FINAL
    ARRAY JOIN
        tool_result_ids AS result_id,
        arrayResize(tool_result_outcomes, length(tool_result_ids), '') AS outcome,
        arrayResize(tool_result_ms, length(tool_result_ids), 0) AS run_ms,
        arrayResize(tool_result_replayed, length(tool_result_ids), 0) AS replayed,
        arrayResize(tool_result_keys, length(tool_result_ids), '') AS idempotency_key
) AS r ON r.result_id = c.call_id;

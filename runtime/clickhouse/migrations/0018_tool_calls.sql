-- Structured output and function calling (docs/tools.md), per turn: the response format
-- asked for ('' | json_object | json_schema), the tools offered and the choice, the calls
-- the answer made (tool names and call ids, in order; their arguments' bytes) and the ids
-- of the calls whose results the turn returned. The view pairs each call with the turn
-- that returned its result (none yet: result_turn_id = ''), and times the client's side:
--   SELECT name, count() AS calls, countIf(result_turn_id != '') AS answered,
--          quantile(0.5)(client_ms) AS client_p50_ms
--   FROM {db}.tool_calls WHERE tenant_id = 'acme' GROUP BY name ORDER BY calls DESC
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS response_format LowCardinality(String) DEFAULT '' AFTER language,
    ADD COLUMN IF NOT EXISTS tools_offered UInt8 DEFAULT 0 AFTER response_format,
    ADD COLUMN IF NOT EXISTS tool_choice LowCardinality(String) DEFAULT '' AFTER tools_offered,
    ADD COLUMN IF NOT EXISTS tool_calls Array(LowCardinality(String)) DEFAULT [] AFTER tool_choice,
    ADD COLUMN IF NOT EXISTS tool_call_ids Array(String) DEFAULT [] AFTER tool_calls,
    ADD COLUMN IF NOT EXISTS tool_arguments_bytes UInt32 DEFAULT 0 AFTER tool_call_ids,
    ADD COLUMN IF NOT EXISTS tool_result_ids Array(String) DEFAULT [] AFTER tool_arguments_bytes;

CREATE VIEW IF NOT EXISTS {db}.tool_calls AS
SELECT
    c.turn_id AS turn_id,
    c.conversation_id AS conversation_id,
    c.tenant_id AS tenant_id,
    c.run_id AS run_id,
    c.name AS name,
    c.call_id AS call_id,
    c.finish_reason AS finish_reason,
    c.completed_at AS called_at,
    r.turn_id AS result_turn_id,
    if(r.turn_id = '', NULL, dateDiff('millisecond', c.completed_at, r.submitted_at)) AS client_ms
FROM
(
    SELECT turn_id, conversation_id, tenant_id, run_id, finish_reason, completed_at, name, call_id
    FROM {db}.traces FINAL
    ARRAY JOIN tool_calls AS name, tool_call_ids AS call_id
) AS c
LEFT JOIN
(
    SELECT turn_id, submitted_at, result_id
    FROM {db}.traces FINAL
    ARRAY JOIN tool_result_ids AS result_id
) AS r ON r.result_id = c.call_id;

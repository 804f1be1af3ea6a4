-- The audit's verdicts joined to the traces (the audit worker scores each finished exchange
-- with Llama Guard after the fact; its verdicts land in the events log as kind
-- 'safety.verdict' with detail 'audit:<allow|block>[:S1,S2]'):
--   audit_action: allow | block ('' when not audited: the queue dropped it, the worker is
--       off, or it is still waiting); audit_labels: the Llama Guard categories (S1..S14);
--   audit_error: the guard failed on this exchange.
--   SELECT arrayJoin(audit_labels) AS category, count() FROM {db}.audited_traces
--   WHERE audit_action = 'block' AND submitted_at > now() - INTERVAL 1 DAY GROUP BY category
CREATE VIEW IF NOT EXISTS {db}.audited_traces AS
SELECT
    t.*,
    a.audit_action,
    a.audit_labels,
    a.audit_error
FROM {db}.traces AS t FINAL
LEFT JOIN
(
    SELECT
        turn_id,
        argMax(splitByChar(':', toString(detail))[2], at) AS audit_action,
        argMax(
            arrayFilter(x -> x != '', splitByChar(',', splitByChar(':', toString(detail))[3])), at
        ) AS audit_labels,
        argMax(toString(error_code), at) AS audit_error
    FROM {db}.events
    WHERE kind = 'safety.verdict' AND startsWith(toString(detail), 'audit:')
    GROUP BY turn_id
) AS a ON a.turn_id = t.turn_id;

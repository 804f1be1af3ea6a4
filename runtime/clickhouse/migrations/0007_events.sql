-- events: the audit log of turns, one row per event (the sink's route "events" writes it
-- from Kafka turns.submitted, turns.enriched, turns.assembled, turns.completed and feedback;
-- workers/sink/event_log.py builds the rows). `traces` has one wide row per turn; this is
-- what happened to it, in order.
--   kind: the event's type tag (turn.submitted | turn.enriched | turn.assembled |
--         turn.completed | feedback.given; routing decisions and safety verdicts to come)
--   ids: turn_id, conversation_id, tenant_id, user_id
--   at: the event's own time (submitted: accepted at the edge; enriched: submitted +
--       preprocessing time; assembled: prompt built; completed: last token or error;
--       feedback: given). step: the event's place in a turn's life (10 submitted,
--       20 enriched, 30 assembled, 60 completed, 80 feedback): sorts events of one millisecond
--   actor: the edge (submitted) or inference worker (completed) that produced it
--   detail: submitted: media kinds; assembled: refused; completed: finish reason;
--           feedback: its kind. error_code: the assembled or completed event's error
--   text_bytes: UTF-8 size of the query (submitted, enriched), the whole prompt
--           (assembled), the answer (completed) or the comment (feedback)
--   payload: the full event as compact JSON (the assembled one holds the whole prompt)
--   kafka_topic, kafka_partition, kafka_offset: where the sink read it (a re-insert after a
--           crash carries the same coordinates and replaces itself)
-- Ordered for "a tenant's events over time"; "all events of turn X" uses the bloom filter
-- on turn_id (or the view turn_timeline). Rows kept 90 days (the payload is large; traces
-- keep the per-turn numbers longer).
--   SELECT kind, at, detail, error_code, text_bytes
--   FROM {db}.events FINAL WHERE turn_id = 't-1' ORDER BY at, step
--   -- refused or failed turns of a tenant today, with their prompt size:
--   SELECT turn_id, kind, error_code, text_bytes FROM {db}.events FINAL
--   WHERE tenant_id = 'acme' AND at >= today() AND error_code != '' ORDER BY at
--   -- the prompt a turn was answered from:
--   SELECT JSONExtractRaw(payload, 'messages') FROM {db}.events
--   WHERE turn_id = 't-1' AND kind = 'turn.assembled' LIMIT 1
CREATE TABLE IF NOT EXISTS {db}.events
(
    kind            LowCardinality(String),
    turn_id         String,
    conversation_id String,
    tenant_id       LowCardinality(String),
    user_id         String,
    at              DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1)),
    step            UInt8,
    actor           LowCardinality(String),
    detail          LowCardinality(String),
    error_code      LowCardinality(String),
    text_bytes      UInt32,
    payload         String CODEC(ZSTD(3)),
    kafka_topic     LowCardinality(String),
    kafka_partition UInt16,
    kafka_offset    UInt64,
    INDEX turn_id_bf turn_id TYPE bloom_filter(0.01) GRANULARITY 4,
    INDEX kafka_offset_idx kafka_offset TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (tenant_id, toDate(at), turn_id, at, kind, kafka_partition, kafka_offset)
TTL toDateTime(at) + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1;

-- A turn's events in order, with the time since the previous event and since the first
-- (milliseconds): where did the turn spend its time, and what did each stage see.
--   SELECT kind, at, gap_ms, since_first_ms, detail FROM {db}.turn_timeline(turn = 't-1')
CREATE VIEW IF NOT EXISTS {db}.turn_timeline AS
SELECT
    turn_id,
    tenant_id,
    kind,
    at,
    step,
    toUnixTimestamp64Milli(at) - toUnixTimestamp64Milli(lagInFrame(at, 1, at) OVER w) AS gap_ms,
    toUnixTimestamp64Milli(at) - toUnixTimestamp64Milli(first_value(at) OVER w) AS since_first_ms,
    actor,
    detail,
    error_code,
    text_bytes
FROM {db}.events FINAL
WHERE turn_id = {turn:String}
WINDOW w AS (ORDER BY at, step ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
ORDER BY at, step;

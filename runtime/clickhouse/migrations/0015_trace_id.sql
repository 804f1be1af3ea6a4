-- The turn's OpenTelemetry trace in its trace row (schemas/tracing, docs/deploy.md "Tracing"):
--   trace_id: the 32-hex-digit trace id of the turn's spans (edge, preprocessing, assembly,
--       inference, traces job), taken from `turn.submitted`'s traceparent; '' when no span
--       of the turn was kept (TURNSTREAM_OTEL_EXPORTER=none at the edge, or the turn was
--       not sampled: TURNSTREAM_OTEL_SAMPLE_RATIO).
--   From a slow turn to its spans (open the id in Jaeger / Tempo / Grafana):
--   SELECT turn_id, trace_id, ttft_ms, e2e_ms FROM {db}.traces FINAL
--   WHERE trace_id != '' AND submitted_at > now() - INTERVAL 1 HOUR
--   ORDER BY e2e_ms DESC LIMIT 10
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS trace_id String DEFAULT '' AFTER arm;

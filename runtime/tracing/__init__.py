"""OpenTelemetry tracing across hops: one turn is one trace.

The edge opens a turn's root span when it accepts `turn.create` and injects its W3C trace
context into the Kafka headers of `turn.submitted`; every consumer continues it from the
headers of what it reads and injects its own span into what it produces, so the trace
follows the turn through preprocessing, assembly, inference and the traces job. The edge
keeps the root span open while it streams the answer (events: started, first token, done).

- `propagation`: W3C trace context in Kafka headers and in `TurnSubmitted.traceparent`
  (the fallback every downstream event carries inside its embedded `submitted`). API only.
- `spans`: the process's tracer and the spans of a hop, named and attributed after the
  OpenTelemetry semantic conventions (messaging, GenAI). API only: what hot paths import.
- `provider`: settings → the SDK's tracer provider and exporter; loaded once at start, and
  only when an exporter is configured.

Without an exporter the tracer is the API's no-op tracer: it records nothing, but still
hands the incoming context on (a no-op span carries its parent's context), so a role with
tracing off does not cut the traces of the roles around it.
"""

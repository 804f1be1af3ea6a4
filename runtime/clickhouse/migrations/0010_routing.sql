-- Routing and admission in the trace (stream_jobs/assembly/routing.py, ws_edge admission):
--   pool: the inference pool the turn was sent to (chat, reasoning, …)
--   intent, route_reason: the semantic router's decision and why (a rule's name, the
--       classifier's label and confidence, a fallback)
--   routing_strategy: router | round_robin | random | key_hash
--   routed_worker: the worker the picker chose ('' for key hashing; worker_id is who
--       actually answered: they differ when a rebalance moved the partition meanwhile)
--   prefix_chars: prompt characters the chosen worker had served recently (its prefix cache)
--   tier: the tenant's tier at admission (free | plus | enterprise); degraded: 1 when
--       overload admitted the turn with less (a smaller pool, fewer max tokens)
--   cache_hit: 1 when the semantic cache answered; cache_similarity its cosine
--   SELECT pool, routing_strategy, quantile(0.99)(ttft_ms), avg(prefix_chars > 0)
--   FROM {db}.traces FINAL WHERE submitted_at > now() - INTERVAL 1 HOUR
--   GROUP BY pool, routing_strategy
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS pool LowCardinality(String) AFTER worker_id,
    ADD COLUMN IF NOT EXISTS intent LowCardinality(String) AFTER pool,
    ADD COLUMN IF NOT EXISTS route_reason String AFTER intent,
    ADD COLUMN IF NOT EXISTS routing_strategy LowCardinality(String) AFTER route_reason,
    ADD COLUMN IF NOT EXISTS routed_worker LowCardinality(String) AFTER routing_strategy,
    ADD COLUMN IF NOT EXISTS prefix_chars UInt32 AFTER routed_worker,
    ADD COLUMN IF NOT EXISTS tier LowCardinality(String) AFTER prefix_chars,
    ADD COLUMN IF NOT EXISTS degraded UInt8 AFTER tier,
    ADD COLUMN IF NOT EXISTS cache_hit UInt8 AFTER degraded,
    ADD COLUMN IF NOT EXISTS cache_similarity Float32 AFTER cache_hit;

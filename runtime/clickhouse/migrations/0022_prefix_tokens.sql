-- Routing by what the engines hold: an inference worker that follows its vLLM engine's KV
-- events (blocks stored and evicted) lets the router count, exactly, the prompt's leading
-- tokens the engine's cache holds (stream_jobs/assembly/routing/kv_lookup.py);
-- `prefix_tokens` is that count for the worker the turn was routed to (0 when its cache is
-- not followed: `prefix_chars` is then the router's approximate match). Compare with what
-- the engine then reused (`cached_prompt_tokens`):
--   SELECT routing_strategy, avg(prefix_tokens), avg(cached_prompt_tokens),
--          avg(cached_prompt_tokens) / avg(prompt_tokens)
--   FROM {db}.traces FINAL WHERE submitted_at > now() - INTERVAL 1 HOUR
--   GROUP BY routing_strategy
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS prefix_tokens UInt32 DEFAULT 0 AFTER prefix_chars;

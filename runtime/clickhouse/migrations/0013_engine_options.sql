-- The engine options that answered a turn (schemas/engine_profile.py, docs/engine-options.md):
--   engine_options: the inference engine's options in force, as one tag, e.g.
--       'spec=ngram:k4:n2-4,quant=none,tp=1,seqs=64,batched=2048,len=2048':
--       spec: speculative decoding (off; ngram:k<drafted tokens>:n<min>-<max n-gram>;
--       draft:k<drafted tokens>:<draft model folder>), quant: weight quantization, tp: tensor
--       parallel size, seqs / batched: sequences and tokens per engine step, len: longest
--       prompt+answer. '' for engines without options (the fake) and turns that never
--       reached an engine.
--   Speculative decoding on vs off, per pool (compare TPOT, not TTFT):
--   SELECT pool, extract(engine_options, 'spec=([a-z]+)') AS spec, count(),
--          quantile(0.5)((e2e_ms - ttft_ms) / greatest(completion_tokens - 1, 1)) AS tpot_ms,
--          quantile(0.99)(itl_p99_ms)
--   FROM {db}.traces FINAL
--   WHERE engine_options != '' AND submitted_at > now() - INTERVAL 1 DAY
--   GROUP BY pool, spec
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS engine_options LowCardinality(String) DEFAULT '' AFTER worker_id;

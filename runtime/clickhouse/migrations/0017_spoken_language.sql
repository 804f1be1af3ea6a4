-- The language a spoken turn was heard in (TURNSTREAM_ASR_MODEL=multilingual: Whisper's
-- detection, ISO 639-1; 'en' with the English-only model; '' for typed turns):
--   SELECT language, count() AS turns, quantile(0.5)(ttft_ms) AS ttft_p50
--   FROM {db}.traces FINAL WHERE audio_count > 0 GROUP BY language ORDER BY turns DESC
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS language LowCardinality(String) DEFAULT '' AFTER image_notice;

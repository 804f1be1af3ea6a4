-- A spoken turn's wait, as the user lives it: from the end of their speech to the first
-- audio of the answer, cut where it went (the voice loop's turns know when the speech
-- ended: `hop_endpointing_ms`, the end-of-turn wait before the turn was accepted; the edge
-- records when the first audio went out in the events log, `speech.delivered`, written
-- after the trace since speech outlasts the text). The parts add up to `total_ms`:
--   endpointing_ms  end of speech → accepted (silence rule or turn model; 0 for a clip)
--   transcript_ms   → out of preprocessing (the ASR; for a typed turn, its preprocessing)
--   first_token_ms  → first token (assembly, queue, prefill)
--   first_audio_ms  → first audio sent to the client (TTS of the first clause, relay)
--   SELECT language, count(), quantile(0.5)(total_ms), quantile(0.9)(total_ms),
--          avg(endpointing_ms), avg(transcript_ms), avg(first_token_ms), avg(first_audio_ms)
--   FROM {db}.speech_hops WHERE submitted_at > now() - INTERVAL 1 DAY GROUP BY language
-- Typed turns have a language too now (fastText lid.176 on the text, '' when unsure:
-- workers/preprocess/text_language.py); `language_source` says which: 'speech' | 'text' | ''.
--   SELECT language_source, language, count() FROM {db}.traces FINAL
--   GROUP BY language_source, language ORDER BY count() DESC
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS language_source LowCardinality(String) DEFAULT '' AFTER language,
    ADD COLUMN IF NOT EXISTS hop_endpointing_ms Float32 DEFAULT 0 AFTER hop_decode_ms;

-- Every answer that was spoken, live or not (run_id, arm as columns); `speech_hops` below
-- is the live traffic only, as the other live views.
CREATE OR REPLACE VIEW {db}.speech_hops_all AS
SELECT
    t.turn_id AS turn_id,
    t.tenant_id AS tenant_id,
    t.user_id AS user_id,
    t.edge_id AS edge_id,
    t.model AS model,
    t.language AS language,
    t.audio_count > 0 AS spoken_question,
    t.run_id AS run_id,
    t.arm AS arm,
    t.submitted_at AS submitted_at,
    d.first_audio_at AS first_audio_at,
    t.hop_endpointing_ms AS endpointing_ms,
    t.hop_preprocess_ms AS transcript_ms,
    t.hop_assembly_ms + t.hop_queue_ms + t.hop_prefill_ms AS first_token_ms,
    greatest(
        0,
        toUnixTimestamp64Milli(d.first_audio_at) - toUnixTimestamp64Milli(t.submitted_at)
            - (transcript_ms + first_token_ms)
    ) AS first_audio_ms,
    endpointing_ms + transcript_ms + first_token_ms + first_audio_ms AS total_ms
FROM {db}.traces AS t FINAL
INNER JOIN
(
    SELECT turn_id, min(at) AS first_audio_at
    FROM {db}.events
    WHERE kind = 'speech.delivered' AND NOT startsWith(detail, 'no_audio')
    GROUP BY turn_id
) AS d ON d.turn_id = t.turn_id
SETTINGS do_not_merge_across_partitions_select_final = 1;

CREATE OR REPLACE VIEW {db}.speech_hops AS
SELECT * EXCEPT (run_id, arm)
FROM {db}.speech_hops_all
WHERE run_id = '' AND arm IN ('', 'control');

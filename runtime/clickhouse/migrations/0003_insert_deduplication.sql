-- The sink retries an insert after a crash between insert and offset commit with the same
-- insert_deduplication_token (the Kafka offsets it covers): let these non-replicated tables
-- remember the last 10000 insert tokens, so the repeat is dropped at insert time (the
-- ReplacingMergeTree merge would also collapse it, but only later, or with FINAL).
ALTER TABLE {db}.turns MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE {db}.traces MODIFY SETTING non_replicated_deduplication_window = 10000;

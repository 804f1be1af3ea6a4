-- Every row the sink writes names the Kafka record it came from: kafka_topic,
-- kafka_partition, kafka_offset. This is how the sink recovers exactly once after a crash:
-- when it is given a partition it asks the table which offsets past the committed one are
-- already in (SELECT kafka_offset ... WHERE kafka_offset >= committed) and skips those
-- records. It does not rely on the insert deduplication token for this: an embedded engine
-- killed in the middle of an insert can keep the token without the rows. The minmax index
-- lets that lookup skip the old parts. Analysts can ignore these columns.
ALTER TABLE {db}.turns
    ADD COLUMN IF NOT EXISTS kafka_topic LowCardinality(String),
    ADD COLUMN IF NOT EXISTS kafka_partition UInt16,
    ADD COLUMN IF NOT EXISTS kafka_offset UInt64 CODEC(Delta, ZSTD(1)),
    ADD INDEX IF NOT EXISTS kafka_offset_idx kafka_offset TYPE minmax GRANULARITY 1;
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS kafka_topic LowCardinality(String),
    ADD COLUMN IF NOT EXISTS kafka_partition UInt16,
    ADD COLUMN IF NOT EXISTS kafka_offset UInt64 CODEC(Delta, ZSTD(1)),
    ADD INDEX IF NOT EXISTS kafka_offset_idx kafka_offset TYPE minmax GRANULARITY 1;
ALTER TABLE {db}.feedback
    ADD COLUMN IF NOT EXISTS kafka_topic LowCardinality(String),
    ADD COLUMN IF NOT EXISTS kafka_partition UInt16,
    ADD COLUMN IF NOT EXISTS kafka_offset UInt64 CODEC(Delta, ZSTD(1)),
    ADD INDEX IF NOT EXISTS kafka_offset_idx kafka_offset TYPE minmax GRANULARITY 1;

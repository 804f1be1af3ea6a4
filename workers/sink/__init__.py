"""The ClickHouse sink: Kafka events → batched, idempotent inserts; offsets committed only
after ClickHouse has the rows."""

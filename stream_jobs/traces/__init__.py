"""The traces job: joins every event of a turn into one `trace.recorded` for ClickHouse."""

"""ClickHouse from every process: the client, SQL helpers and the migration runner."""

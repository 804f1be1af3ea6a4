"""What the tests and the benchmarks share: a pipeline of roles in-process or as child
processes, Kafka and ClickHouse helpers, media fixtures, tiny models, polling."""

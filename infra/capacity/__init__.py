"""Capacity planning: from users to QPS, tokens/s, GPUs per pool, cost, Kafka partitions and
edge processes (`python -m infra.capacity --help`).

`model` is the arithmetic (pure, no I/O), `measured` replaces assumed GPU throughput with our
benchmarks' or ClickHouse traces' figures, `cli` prints the table, `plot` draws the day.
"""

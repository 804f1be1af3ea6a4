"""The shared runtime every process imports: typed settings, process start, the metrics
endpoint, tracing, Redis and ClickHouse clients, blob stores, the workers' state board and
consumer lag. The contract (`schemas/`) stays pure; this is where its I/O lives.
"""

"""The fault-injection suite: the real stack on its own Kafka, Redis and ClickHouse, a steady
load of conversations, one fault at a time, then the books (`python -m bench.faults`)."""

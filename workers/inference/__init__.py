"""The inference worker: turns in from Kafka, tokens out to the edge over Redis, on vLLM."""

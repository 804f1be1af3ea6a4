"""Prompt assembly: a faust-streaming job that keeps each conversation's history in a table
(changelog in Kafka) and turns `turns.enriched` into `turn.assembled`s on the pools' topics."""

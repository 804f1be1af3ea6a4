"""Kafka consumer services, one subpackage per role, sharing `workers.runtime`."""

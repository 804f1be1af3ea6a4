"""Code that writes to Kafka from outside the workers: the edge's turn publisher, replay."""

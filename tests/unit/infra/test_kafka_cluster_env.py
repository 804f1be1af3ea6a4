"""`python -m infra.stack --kafka-cluster`: the variables that make the scripts start three
brokers and every role use them (replicated topics, idempotent producers)."""

from infra.stack import kafka_cluster_env
from runtime.settings import Settings


def test_the_cluster_lists_its_three_brokers_on_the_configured_port_and_the_next_ones():
    env = kafka_cluster_env(Settings.from_env({"TURNSTREAM_KAFKA_BOOTSTRAP": "127.0.0.1:19092"}))
    assert env["TURNSTREAM_KAFKA_BOOTSTRAP"] == "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"
    settings = Settings.from_env(env)
    assert settings.kafka_replication_factor == 3
    assert settings.kafka_idempotent


def test_an_already_listed_cluster_is_read_from_its_first_broker():
    listed = "10.0.0.5:9092,10.0.0.5:9094,10.0.0.5:9096"
    env = kafka_cluster_env(Settings.from_env({"TURNSTREAM_KAFKA_BOOTSTRAP": listed}))
    assert env["TURNSTREAM_KAFKA_BOOTSTRAP"] == listed

import dataclasses

import pytest

from runtime.settings import Settings, describe, settings_env
from schemas.channels import RedisNames
from schemas.errors import SettingsError
from schemas.topics import REGISTRY


def test_settings_read_declared_variables_with_types():
    s = Settings.from_env({"TURNSTREAM_EDGE_PORT": "9000", "TURNSTREAM_NAMESPACE": "ns"})
    assert s.edge_port == 9000 and s.namespace == "ns"
    assert Settings.from_env({}, edge_port=1).edge_port == 1


def test_bad_setting_names_the_variable():
    with pytest.raises(SettingsError, match="TURNSTREAM_EDGE_PORT"):
        Settings.from_env({"TURNSTREAM_EDGE_PORT": "eighty"})


def test_settings_travel_to_child_processes_unchanged():
    settings = Settings.from_env({}, namespace="ns", edge_port=0, rag_min_score=0.5)
    assert Settings.from_env(settings_env(settings)) == settings


def test_co_partitioned_topics_agree():
    """The assembly job joins these by conversation on one partition: counts must match."""
    keyed = [t for t in REGISTRY if t.key == "conversation_id"]
    assert len({t.partitions for t in keyed}) == 1 and len(keyed) >= 4


def test_every_setting_is_documented_once():
    names = [env for env, _, doc in describe()]
    assert len(names) == len(set(names)) == len(dataclasses.fields(Settings))
    assert all(env.startswith("TURNSTREAM_") for env in names)
    assert all(doc for _, _, doc in describe())


def test_topic_registry_and_namespaces():
    names = [t.name for t in REGISTRY]
    assert len(names) == len(set(names))
    assert all(t.partitions >= 1 and t.retention_ms > 0 for t in REGISTRY)
    assert REGISTRY[0].full_name("replay-7") == f"replay-7.{REGISTRY[0].name}"
    assert RedisNames.for_namespace("ns").profile_key("t", "u") == "ns:ts:profile:t:u"
    assert RedisNames.for_namespace("").owner_key("t", "c") == "ts:conv:t:c:owner"

"""The import rules of `infra.import_rules`, on the code as it is and on imports made up to
break each rule once (so a checker that stopped seeing a breach would fail here too)."""

from __future__ import annotations

import pytest

from infra.import_rules import Import, breach, cycles, imports_of, read_imports


def test_the_code_keeps_every_import_rule():
    found = read_imports()
    assert len(found) > 1000  # the reader found the code
    problems = [f"{i.source}:{i.line}: {why}" for i in found if (why := breach(i))]
    assert problems == []


def test_no_module_imports_itself_back():
    assert cycles(read_imports()) == []


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("workers.inference.service", "workers.safety.service"),  # role -> role
        ("workers.imagegen.presence", "workers.inference.state_board"),
        ("flywheel.embedder", "stream_jobs.assembly.retrieval"),
        ("workers.safety.app", "ws_edge.client"),
        ("stream_jobs.traces.rebuild", "workers.runtime.kafka"),  # another family's runtime
        ("ws_edge.server", "infra.stack"),  # a role -> a tool
        ("producers.replay.runner", "harness.stack"),
        ("schemas.events", "runtime.settings"),  # the contract -> anything
        ("schemas.channels", "redis.asyncio"),
        ("schemas.blobs", "asyncio"),
        ("schemas.ids", "socket"),
        ("runtime.state_board", "workers.inference.engines.engine"),  # a library -> a role
        ("runtime.settings", "moderation.errors"),  # a library -> the one above it
        ("moderation.screen", "workers.runtime.coalescing"),
        ("bench.cost", "tests.support.stack"),  # tools
        ("harness.stack", "bench.namespace"),
        ("infra.capacity.cli", "bench.cost"),
    ],
)
def test_each_kind_of_breach_is_seen(source, target):
    assert breach(Import(source, target, 1, True)) is not None


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("ws_edge.server", "producers.turn_publisher"),  # the edge's publisher (DESIGN §2)
        ("producers.replay.runner", "producers.turn_publisher"),
        ("workers.tts.service", "workers.runtime.relay"),
        ("stream_jobs.traces.app", "stream_jobs.faust_app"),
        ("workers.inference.output_guard", "moderation.windows"),
        ("moderation.screen", "runtime.settings"),
        ("schemas.events", "msgspec"),
        ("schemas.ids", "time"),
        ("bench.cost", "harness.stack"),
        ("tests.unit.test_x", "bench.cost"),
        ("infra.stack", "infra.chat"),
    ],
)
def test_what_the_rules_allow_passes(source, target):
    assert breach(Import(source, target, 1, True)) is None


def test_a_cycle_is_found_only_through_module_level_imports():
    ring = [Import("bench.a", "bench.b", 1, True), Import("bench.b", "bench.a", 1, True)]
    assert cycles(ring) == [["bench.a", "bench.b"]]
    deferred = [ring[0], Import("bench.b", "bench.a", 9, False)]  # inside a function
    assert cycles(deferred) == []


def test_from_package_import_module_counts_as_the_module():
    text = "from schemas import codec\nfrom schemas.events import TurnSubmitted\n"
    found = imports_of("ws_edge.x", text, {"schemas.codec", "schemas.events"})
    assert [i.target for i in found] == ["schemas.codec", "schemas.events"]
    nested = imports_of("ws_edge.x", "def f():\n    import redis\n", set())
    assert [(i.target, i.top_level) for i in nested] == [("redis", False)]

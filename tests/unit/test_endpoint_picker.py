"""Picking a worker: prefix affinity unless saturated, load, pending sends, baselines."""

from __future__ import annotations

import random
from dataclasses import dataclass

from schemas.prefix import PrefixMemory, matched_chars, message_chain, prefix_lengths
from schemas.worker_state import WorkerState, decode_state, encode_state
from stream_jobs.assembly.endpoint_picker import EndpointPicker, Strategy


@dataclass(frozen=True)
class Msg:
    role: str
    content: str


DOC = Msg("user", "Summarise this contract: " + "clause " * 600)
FIRST = [Msg("system", "You are helpful."), DOC]
SECOND = [*FIRST, Msg("assistant", "It says ..."), Msg("user", "And the penalties?")]


def state(worker: str, partitions: list[int], at_ms: float = 1000.0, **fields) -> WorkerState:
    return WorkerState(
        worker_id=worker, pool="chat", at_ms=at_ms, partitions=partitions, capacity=8, **fields
    )


def test_the_chain_matches_exactly_the_shared_messages():
    first, second = message_chain(FIRST), message_chain(SECOND)
    assert second[:2] == first and second[2] != first[-1]
    assert message_chain([Msg("user", "a")]) != message_chain([Msg("system", "a")])
    lengths = prefix_lengths(SECOND)
    assert matched_chars(second, lengths, {first[-1]}) == lengths[1]
    assert matched_chars(second, lengths, set()) == 0


def test_prefix_memory_is_bounded_and_keeps_the_most_recent():
    memory = PrefixMemory(capacity=2)
    for n in range(3):
        memory.remember(message_chain([Msg("user", f"q{n}")]))
    assert len(memory) == 2
    assert memory.summary() == [message_chain([Msg("user", f"q{n}")])[-1] for n in (1, 2)]
    memory.remember([])  # an empty prompt changes nothing
    assert len(memory) == 2


def test_the_worker_holding_the_prefix_wins_over_an_idle_one():
    memory = PrefixMemory()
    memory.remember(message_chain(FIRST))
    holder = state("w1", [0, 1], in_flight=3, prefixes=memory.summary())
    idle = state("w2", [2, 3])
    picker = EndpointPicker(Strategy.ROUTER)
    pick = picker.pick(
        [idle, holder],
        key=b"conv",
        chain=message_chain(SECOND),
        lengths=prefix_lengths(SECOND),
        now_ms=1100,
    )
    assert pick.worker_id == "w1" and pick.partition in (0, 1)
    assert pick.prefix_chars > 4000 and "prefix" in pick.reason


def test_a_saturated_holder_loses_its_prefix_credit():
    memory = PrefixMemory()
    memory.remember(message_chain(FIRST))
    full = state("w1", [0], in_flight=8, kv_cache_usage=0.95, prefixes=memory.summary())
    idle = state("w2", [1])
    pick = EndpointPicker().pick(
        [full, idle],
        key=b"c",
        chain=message_chain(SECOND),
        lengths=prefix_lengths(SECOND),
        now_ms=1100,
    )
    assert pick.worker_id == "w2" and pick.partition == 1


def test_without_a_prefix_the_least_loaded_wins_and_pending_sends_count():
    picker = EndpointPicker()
    a, b = state("a", [0], in_flight=1), state("b", [1], in_flight=2)
    picks = [picker.pick([a, b], key=b"k%d" % i, now_ms=1100 + i).worker_id for i in range(4)]
    # a takes the first; with it pending, a and b are level (2 each): the tie goes to a
    # (first by id); then a holds 3 to b's 2, so b; and so on: the burst is spread
    assert picks == ["a", "a", "b", "a"]


def test_stale_or_partitionless_workers_are_not_routed_to():
    picker = EndpointPicker(ttl_ms=500)
    stale = state("old", [0], at_ms=0)
    rebalancing = state("new", [])
    pick = picker.pick([stale, rebalancing], key=b"c", now_ms=1000)
    assert (pick.worker_id, pick.partition) == ("", None) and "key hash" in pick.reason


def test_baselines_ignore_the_prefix():
    memory = PrefixMemory()
    memory.remember(message_chain(FIRST))
    states = [state("w1", [0], prefixes=memory.summary()), state("w2", [1])]
    chain, lengths = message_chain(SECOND), prefix_lengths(SECOND)
    rr = EndpointPicker(Strategy.ROUND_ROBIN)
    assert [
        rr.pick(states, key=b"c", chain=chain, lengths=lengths, now_ms=1100).worker_id
        for _ in range(4)
    ] == ["w1", "w2", "w1", "w2"]
    rnd = EndpointPicker(Strategy.RANDOM, rng=random.Random(7))
    seen = {rnd.pick(states, key=b"c", now_ms=1100).worker_id for _ in range(20)}
    assert seen == {"w1", "w2"}
    assert EndpointPicker(Strategy.KEY_HASH).pick(states, key=b"c", now_ms=1100).partition is None


def test_the_state_round_trips():
    s = state("w", [3, 4], prefixes=[-5, 7], kv_cache_usage=0.5)
    assert decode_state(encode_state(s)) == s

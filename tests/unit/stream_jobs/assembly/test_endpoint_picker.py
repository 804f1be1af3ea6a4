"""Picking a worker: prefix affinity unless saturated, load, pending sends, baselines."""

from __future__ import annotations

import random
from dataclasses import dataclass

from schemas.prefix import PrefixMemory, matched_chars, message_chain, prefix_lengths
from schemas.worker_state import KvBlocks, WorkerState, decode_state, encode_state
from stream_jobs.assembly.routing.endpoint_picker import EndpointPicker, Strategy


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


def test_new_conversations_spread_by_working_set_then_load():
    picker = EndpointPicker(rng=random.Random(1))
    a, b = state("a", [0], in_flight=1), state("b", [1], in_flight=2)
    picks = []
    for i in range(4):
        prompt = [Msg("user", f"document {i}: " + "text " * 400)]
        pick = picker.pick(
            [a, b],
            key=b"conv%d" % i,
            chain=message_chain(prompt),
            lengths=prefix_lengths(prompt),
            now_ms=1100 + i,
        )
        picks.append(pick.worker_id)
        assert "working set" in pick.reason
    # equal (empty) working sets: the less loaded first; then each goes where fewer live
    # conversations' prompts must stay cached
    assert picks == ["a", "b", "a", "b"]


def test_turns_sent_since_the_last_state_count_as_load():
    memory = PrefixMemory()
    memory.remember(message_chain(FIRST))
    both = [state(w, [n], prefixes=memory.summary()) for n, w in enumerate(("a", "b"))]
    picker = EndpointPicker(rng=random.Random(5))
    chain, lengths = message_chain(SECOND), prefix_lengths(SECOND)
    first, second = (
        picker.pick(both, key=b"c%d" % i, chain=chain, lengths=lengths, now_ms=1100 + i)
        for i in range(2)
    )
    assert {first.worker_id, second.worker_id} == {"a", "b"}  # the states are the same age


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
    followed = state("w", [1], kv_blocks=KvBlocks(block_size=128, hash_seed="7", blocks=40))
    assert decode_state(encode_state(followed)) == followed


def test_prefix_memory_forgets_what_the_engine_cache_cannot_hold():
    memory = PrefixMemory(max_tokens=1000)
    chains = [message_chain([Msg("user", f"doc {n}")]) for n in range(3)]
    for chain in chains:
        memory.remember(chain, 400)
    assert memory.summary() == [chains[1][-1], chains[2][-1]]  # 1200 > 1000: the oldest went
    memory.remember(chains[1], 400)  # used again: most recent now
    memory.remember(message_chain([Msg("user", "huge")]), 5000)  # alone, it is still kept
    assert len(memory) == 1


def test_what_an_engine_holds_wins_over_what_a_worker_served():
    """Both workers served the prompt lately (the approximate index cannot tell them apart);
    the KV events say only w2's engine still holds it: the follow-up goes there."""
    memory = PrefixMemory()
    memory.remember(message_chain(FIRST))
    states = [state(w, [n], prefixes=memory.summary()) for n, w in enumerate(("w1", "w2"))]
    chain, lengths = message_chain(SECOND), prefix_lengths(SECOND)
    for seed in range(6):
        pick = EndpointPicker(rng=random.Random(seed)).pick(
            states, key=b"c", chain=chain, lengths=lengths, now_ms=1100, held={"w1": 0, "w2": 512}
        )
        assert pick.worker_id == "w2" and pick.prefix_tokens == 512
        assert "512 tokens held (KV events)" in pick.reason


def test_an_evicted_prefix_stops_attracting_the_conversation():
    """w1 served the prompt but its engine evicted it: no credit, the turn is placed as a
    new prefix, by working set and load, not sent after a cache that is gone."""
    memory = PrefixMemory()
    memory.remember(message_chain(FIRST))
    evicted = state("w1", [0], prefixes=memory.summary())
    busy = state("w2", [1], in_flight=2)
    chain, lengths = message_chain(SECOND), prefix_lengths(SECOND)
    picker = EndpointPicker(rng=random.Random(2))
    approximate = picker.pick([evicted, busy], key=b"c", chain=chain, lengths=lengths, now_ms=1100)
    assert approximate.worker_id == "w1" and "served" in approximate.reason
    exact = EndpointPicker(rng=random.Random(2)).pick(
        [evicted, busy], key=b"c", chain=chain, lengths=lengths, now_ms=1100, held={"w1": 0}
    )
    assert exact.prefix_tokens == 0 and "new prefix" in exact.reason


def test_a_worker_without_kv_events_is_scored_on_its_served_prefixes():
    memory = PrefixMemory()
    memory.remember(message_chain(FIRST))
    unfollowed = state("w1", [0], prefixes=memory.summary())
    followed = state("w2", [1])
    chain, lengths = message_chain(SECOND), prefix_lengths(SECOND)
    pick = EndpointPicker().pick(
        [unfollowed, followed], key=b"c", chain=chain, lengths=lengths, now_ms=1100, held={"w2": 0}
    )
    assert pick.worker_id == "w1" and pick.prefix_chars > 4000 and pick.prefix_tokens == 0

"""Following an engine's KV cache from its events: vLLM's wire format, stores and evictions,
missed batches, and the check that its hashes are ours."""

from __future__ import annotations

import msgspec
import pytest

from runtime.kv_blocks import block_hashes
from workers.inference.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    KvBlockIndex,
    decode_batch,
)

TOKENS = list(range(100, 164))  # four blocks of 16


def stored(tokens=TOKENS, salt="", hashes=None, parent=None) -> BlockStored:
    return BlockStored(
        block_hashes=hashes if hashes is not None else block_hashes(tokens, 16, salt=salt),
        parent_block_hash=parent,
        token_ids=list(tokens),
        block_size=16,
        extra_keys=[[salt] if salt and i == 0 else None for i in range(len(tokens) // 16)],
    )


def batch(*events) -> EventBatch:
    return EventBatch(ts=0.0, events=list(events))


def test_vllms_own_batches_decode():
    from vllm.distributed import kv_events as theirs

    hashes = block_hashes(TOKENS, 16, salt="acme")
    payload = msgspec.msgpack.encode(
        theirs.KVEventBatch(
            ts=1.0,
            events=[
                theirs.BlockStored(
                    block_hashes=hashes,
                    parent_block_hash=None,
                    token_ids=TOKENS,
                    block_size=16,
                    lora_id=None,
                    medium="GPU",
                    lora_name=None,
                    extra_keys=[("acme",), None, None, None],
                ),
                theirs.BlockRemoved(block_hashes=hashes[2:], medium="GPU"),
                theirs.AllBlocksCleared(),
            ],
            data_parallel_rank=0,
        )
    )
    decoded = decode_batch(payload)
    first, removed, cleared = decoded.events
    assert isinstance(first, BlockStored) and first.block_hashes == hashes
    assert first.extra_keys == [["acme"], None, None, None]
    assert isinstance(removed, BlockRemoved) and removed.block_hashes == hashes[2:]
    assert isinstance(cleared, AllBlocksCleared)
    index = KvBlockIndex(block_size=16)
    index.apply(0, batch(first))
    assert index.agrees  # the salted first block recomputed exactly


def test_stores_and_evictions_are_followed_and_coalesced():
    index = KvBlockIndex(block_size=16)
    hashes = block_hashes(TOKENS, 16)
    index.apply(0, batch(stored()))
    index.apply(1, batch(BlockRemoved(block_hashes=hashes[2:])))
    assert index.blocks == set(hashes[:2])
    changes = index.take_changes()
    assert changes.stored == set(hashes[:2]) and changes.removed == set(hashes[2:])
    assert not changes.cleared and not index.take_changes()
    index.apply(2, batch(BlockRemoved(block_hashes=hashes[:1]), stored()))
    changes = index.take_changes()
    assert changes.stored == set(hashes) and not changes.removed  # stored again after
    index.apply(3, batch(AllBlocksCleared(), stored(TOKENS[:16])))
    changes = index.take_changes()
    assert changes.cleared and changes.stored == {hashes[0]} and index.blocks == {hashes[0]}


def test_a_missed_batch_is_noticed_and_a_replayed_duplicate_ignored():
    index = KvBlockIndex(block_size=16)
    assert index.missing(0) is None and index.missing(3) == 0  # joined late
    index.apply(0, batch(stored()))
    assert index.missing(1) is None and index.missing(4) == 1
    assert index.apply(0, batch(AllBlocksCleared())) is False  # already applied
    assert len(index.blocks) == 4


def test_a_reset_claims_nothing_until_blocks_are_stored_again():
    index = KvBlockIndex(block_size=16)
    index.apply(0, batch(stored()))
    index.take_changes()
    index.reset(9)
    assert not index.blocks and index.take_changes().cleared and index.next_seq == 9
    assert index.resets == 1


@pytest.mark.parametrize(
    "event",
    [
        stored(hashes=block_hashes(TOKENS, 16, seed="42")),  # the engine has another seed
        stored(hashes=block_hashes(TOKENS, 16, salt="acme")),  # a salt we were not told of
        stored(hashes=[h ^ 1 for h in block_hashes(TOKENS, 16)]),
    ],
)
def test_hashes_that_are_not_ours_are_noticed(event):
    index = KvBlockIndex(block_size=16)
    index.apply(0, batch(event))
    assert index.mismatched == 1 and not index.agrees


def test_only_first_blocks_are_checked_and_one_match_is_needed():
    index = KvBlockIndex(block_size=16)
    assert not index.agrees
    index.apply(0, batch(stored(TOKENS[16:], hashes=[1, 2, 3], parent=5)))  # no parent known
    assert not index.agrees and index.mismatched == 0
    index.apply(1, batch(stored(salt="acme")))
    assert index.agrees and index.verified == 1

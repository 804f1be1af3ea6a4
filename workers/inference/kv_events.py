"""What a vLLM engine's KV cache holds, followed from the events it publishes (vLLM 0.32
`kv_events_config`, ZMQ: `workers/inference/kv_mirror.py` receives them), so the router
can score workers by the blocks of a prompt they really hold (`runtime.kv_blocks`).

The wire format is vLLM's (`vllm/distributed/kv_events.py`: msgpack, a batch as an array
[ts, events, dp_rank], each event a map tagged by its class name); only the fields read
here are declared, others are ignored, so a newer vLLM's added fields change nothing.

`KvBlockIndex` is pure: it applies numbered batches, keeps the set of blocks held and the
changes not yet mirrored, notices a missed batch (the caller replays it or resets), and
checks the engine's hashes against `runtime.kv_blocks` on every prompt's first blocks: a
worker whose engine hashes otherwise (another seed, algorithm or version) says so, and the
router falls back to its approximate index rather than trusting hashes that never match.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from runtime.kv_blocks import DEFAULT_SEED, block_hash, external, none_hash


class BlockStored(msgspec.Struct, tag=True, frozen=True):
    block_hashes: list[int]
    parent_block_hash: int | None = None
    token_ids: list[int] = []
    block_size: int = 0
    extra_keys: list[list | None] | None = None


class BlockRemoved(msgspec.Struct, tag=True, frozen=True):
    block_hashes: list[int]


class AllBlocksCleared(msgspec.Struct, tag=True, frozen=True):
    pass


class EventBatch(msgspec.Struct, array_like=True, frozen=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


_decoder = msgspec.msgpack.Decoder(EventBatch)


def decode_batch(payload: bytes) -> EventBatch:
    """Raises msgspec.DecodeError/ValidationError on a payload it cannot read."""
    return _decoder.decode(payload)


@dataclass(slots=True)
class Changes:
    """What the mirror must do to match the engine since its last flush."""

    cleared: bool = False  # drop everything first
    stored: set[int] = field(default_factory=set)
    removed: set[int] = field(default_factory=set)

    def __bool__(self) -> bool:
        return self.cleared or bool(self.stored) or bool(self.removed)


class KvBlockIndex:
    def __init__(self, *, block_size: int, seed: str = DEFAULT_SEED) -> None:
        self.block_size = block_size
        self.seed = seed
        self.blocks: set[int] = set()
        self.next_seq: int | None = None  # the batch expected next (None: none seen yet)
        self.verified = 0  # first blocks whose hash matched ours
        self.mismatched = 0
        self.resets = 0
        self._none_hash = none_hash(seed)
        self._changes = Changes()

    @property
    def agrees(self) -> bool:
        """The engine's hashes were checked and every one matched ours."""
        return self.verified > 0 and self.mismatched == 0

    def missing(self, seq: int) -> int | None:
        """The first batch missed when `seq` arrives (None: nothing missed). Before any
        batch, 0 is expected: the engine numbers its batches from its start."""
        expected = self.next_seq or 0
        return expected if seq > expected else None

    def apply(self, seq: int, batch: EventBatch) -> bool:
        """Apply batch `seq`; False when it was applied already (a replayed duplicate)."""
        if self.next_seq is not None and seq < self.next_seq:
            return False
        for event in batch.events:
            if isinstance(event, BlockStored):
                self._check(event)
                for h in event.block_hashes:
                    self.blocks.add(h)
                    self._changes.removed.discard(h)
                    self._changes.stored.add(h)
            elif isinstance(event, BlockRemoved):
                for h in event.block_hashes:
                    self.blocks.discard(h)
                    self._changes.stored.discard(h)
                    self._changes.removed.add(h)
            else:
                self._clear()
        self.next_seq = seq + 1
        return True

    def reset(self, seq: int) -> None:
        """Batches before `seq` are lost for good: what the engine holds is unknown, so
        claim nothing (the blocks it stores from now on are learnt again)."""
        self._clear()
        self.resets += 1
        self.next_seq = seq

    def take_changes(self) -> Changes:
        changes, self._changes = self._changes, Changes()
        return changes

    def _clear(self) -> None:
        self.blocks.clear()
        self._changes = Changes(cleared=True)

    def _check(self, event: BlockStored) -> None:
        """Recompute a prompt's first blocks (those with no parent) and compare."""
        if event.parent_block_hash is not None or event.block_size != self.block_size:
            return
        keys = event.extra_keys or [None] * len(event.block_hashes)
        parent = self._none_hash
        for index, published in enumerate(event.block_hashes):
            extra = keys[index] if index < len(keys) else None
            if extra is not None and not (index == 0 and len(extra) == 1):
                return  # images or adapters in the key: not ours to recompute
            tagged = (("cache_salt", extra[0]),) if extra else None
            start = index * self.block_size
            tokens = event.token_ids[start : start + self.block_size]
            if len(tokens) < self.block_size:
                return
            parent = block_hash(parent, tokens, tagged)
            if external(parent) != published:
                self.mismatched += 1
                return
        self.verified += 1

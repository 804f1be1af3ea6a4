"""An inference worker's state as the router reads it (Redis hash
`RedisNames.worker_states_key(pool)`, field = worker id), written every
TURNSTREAM_WORKER_STATE_INTERVAL_MS by `runtime.state_board`.

Unlike `WorkerMetrics` (Kafka, for history and dashboards) this is only the latest value,
and it says which partitions of the pool's topic the worker owns right now (so the router
can reach it through Kafka) and which prompt prefixes it served recently (its prefix cache,
approximately: `schemas.prefix`).
"""

from __future__ import annotations

import msgspec


class KvBlocks(msgspec.Struct, frozen=True):
    """The worker follows its engine's KV cache block by block (its KV events, mirrored to
    the Redis set `RedisNames.kv_blocks_key`): how the engine names its blocks
    (`runtime.kv_blocks`) and how many it holds. Present only while the events flow and
    the engine's hashes were checked to match ours; otherwise the router falls back to
    `prefixes`."""

    block_size: int
    hash_seed: str
    blocks: int = 0


class WorkerState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    worker_id: str
    pool: str
    at_ms: float
    partitions: list[int]  # of topic inference.<pool>, assigned to this worker by its group
    capacity: int  # turns it takes at once (TURNSTREAM_MAX_INFLIGHT_TURNS)
    running: int = 0  # requests in the engine's decode batch
    waiting: int = 0  # requests the engine has not scheduled yet
    queue_depth: int = 0  # turns taken from Kafka, not yet handed to the engine
    in_flight: int = 0  # turns held (queued, generating or being recorded)
    kv_cache_usage: float = 0.0  # 0..1
    prefilling_tokens: int = 0  # prompt tokens being prefilled now (a large prefill stalls)
    prefixes: list[int] = []  # chain ends of recently served prompts (schemas.prefix)
    kv_blocks: KvBlocks | None = None  # the engine's cache, exactly (None: not followed)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WorkerState)


def encode_state(state: WorkerState) -> bytes:
    return _encoder.encode(state)


def decode_state(raw: bytes) -> WorkerState:
    """Raises msgspec.DecodeError/ValidationError on a malformed entry (callers skip it)."""
    return _decoder.decode(raw)


def fresh(states: list[WorkerState], now_ms: float, ttl_ms: float) -> list[WorkerState]:
    """The states a router may act on: recent, and owning at least one partition."""
    return [s for s in states if now_ms - s.at_ms <= ttl_ms and s.partitions]

"""The worker's engine's KV cache, mirrored to Redis for the router: the engine publishes
the blocks it stores and evicts over ZMQ (vLLM's KV events); this task follows them
(`kv_events.KvBlockIndex`) and every `flush_s` writes the coalesced changes to the set
`RedisNames.kv_blocks_key(pool, worker)`, which the router asks which blocks of a prompt
it holds (`stream_jobs/assembly/routing/kv_lookup.py`).

A missed batch (ZMQ drops when a subscriber lags, or joins late) is asked again from the
engine's replay socket; one the engine no longer buffers resets the index (claim nothing
rather than blocks long evicted). A failed Redis write marks the mirror stale: the next
write replaces the whole set, and until then the worker's state carries no `kv_blocks`,
so the router uses its approximate index for it. The set expires `ttl_s` after the last
write and is deleted when the worker stops: a dead worker's blocks are forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import msgspec
from redis.asyncio import Redis

from schemas.worker_state import KvBlocks
from workers.inference.kv_events import Changes, KvBlockIndex, decode_batch

log = logging.getLogger("turnstream.inference.kv")

END_SEQ = (-1).to_bytes(8, "big", signed=True)
REPLAY_TIMEOUT_S = 2.0
CHUNK = 5000  # hashes per SADD/SREM


@dataclass(frozen=True, slots=True)
class KvEventSource:
    """Where an engine publishes its KV events and how it names its blocks."""

    endpoint: str  # ZMQ PUB address (the engine binds it)
    replay_endpoint: str  # ZMQ ROUTER address for missed batches
    topic: str
    block_size: int
    hash_seed: str


def kv_event_source(engine: object) -> KvEventSource | None:
    """Where the engine publishes its KV events (vLLM with `kv_events`); None for engines
    that publish none (the fake, transformers)."""
    source = getattr(engine, "kv_events", None)
    return source if isinstance(source, KvEventSource) else None


class KvMirror:
    def __init__(
        self,
        *,
        source: KvEventSource,
        redis: Redis,
        key: str,
        flush_s: float,
        ttl_s: float,
    ) -> None:
        self.source = source
        self.redis = redis
        self.key = key
        self.flush_s = flush_s
        self.ttl_s = ttl_s
        self.index = KvBlockIndex(block_size=source.block_size, seed=source.hash_seed)
        self._stale = True  # nothing written yet: the first write replaces the set
        self._warned_mismatch = False

    def state(self) -> KvBlocks | None:
        """What the worker's state says of its cache (None: the router must not trust it)."""
        if self._stale or not self.index.agrees:
            return None
        return KvBlocks(
            block_size=self.source.block_size,
            hash_seed=self.source.hash_seed,
            blocks=len(self.index.blocks),
        )

    async def run(self) -> None:
        """Follow the engine until cancelled; then delete the mirror. A mirror that fails
        retires (the router falls back for this worker) and never takes the worker down."""
        try:
            await self._follow()
        except Exception:
            log.exception("KV mirror failed: the router falls back for this worker")
            self._stale = True
            await self._delete()
            await asyncio.Event().wait()  # until the worker stops

    async def _follow(self) -> None:
        import zmq
        import zmq.asyncio

        context = zmq.asyncio.Context()
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, self.source.topic.encode())
        sub.connect(self.source.endpoint)
        loop = asyncio.get_running_loop()
        try:
            await self._flush()
            due = loop.time() + self.flush_s
            while True:
                wait_ms = max(0, int((due - loop.time()) * 1000))
                if await sub.poll(wait_ms, zmq.POLLIN):
                    await self._receive(await sub.recv_multipart(), context)
                if loop.time() >= due:
                    await self._flush()
                    due = loop.time() + self.flush_s
        finally:
            sub.close(linger=0)
            context.destroy(linger=0)
            await self._delete()

    async def _receive(self, frames: list[bytes], context) -> None:
        if len(frames) != 3:
            return
        seq = int.from_bytes(frames[1], "big")
        missed = self.index.missing(seq)
        if missed is not None:
            await self._replay(missed, seq, context)
        self._apply(seq, frames[2])

    def _apply(self, seq: int, payload: bytes) -> None:
        try:
            batch = decode_batch(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            log.warning("KV event batch %d unreadable (%s): forgetting the cache", seq, err)
            self.index.reset(seq + 1)
            return
        self.index.apply(seq, batch)
        if self.index.mismatched and not self._warned_mismatch:
            self._warned_mismatch = True
            log.warning(
                "the engine's block hashes differ from runtime.kv_blocks (seed %r, block "
                "size %d): routing falls back to the approximate prefix index",
                self.source.hash_seed,
                self.source.block_size,
            )

    async def _replay(self, start: int, upto: int, context) -> None:
        """Ask the engine for batches `start`..`upto - 1`; reset when it has them no more."""
        import zmq

        dealer = context.socket(zmq.DEALER)
        dealer.connect(self.source.replay_endpoint)
        got: list[tuple[int, bytes]] = []
        try:
            # the send is inside the bound too: a DEALER with no peer yet blocks its send
            async with asyncio.timeout(REPLAY_TIMEOUT_S):
                await dealer.send_multipart([b"", start.to_bytes(8, "big")])
                while True:
                    frames = await dealer.recv_multipart()
                    if len(frames) != 4 or frames[2] == END_SEQ:
                        break
                    got.append((int.from_bytes(frames[2], "big"), frames[3]))
        except TimeoutError:
            log.warning("no replay of KV events from %d: forgetting the cache", start)
        finally:
            dealer.close(linger=0)
        wanted = [(seq, payload) for seq, payload in got if start <= seq < upto]
        if not wanted or wanted[0][0] != start or len(wanted) != upto - start:
            self.index.reset(upto)
            return
        for seq, payload in wanted:
            self._apply(seq, payload)

    async def _flush(self) -> None:
        changes = self.index.take_changes()
        if self._stale:  # replace the whole set
            changes = Changes(cleared=True, stored=set(self.index.blocks))
        try:
            async with asyncio.timeout(max(1.0, self.flush_s)):
                async with self.redis.pipeline(transaction=True) as pipe:
                    if changes.cleared:
                        pipe.delete(self.key)
                    removed, stored = list(changes.removed), list(changes.stored)
                    for at in range(0, len(removed), CHUNK):
                        pipe.srem(self.key, *removed[at : at + CHUNK])
                    for at in range(0, len(stored), CHUNK):
                        pipe.sadd(self.key, *stored[at : at + CHUNK])
                    pipe.pexpire(self.key, int(self.ttl_s * 1000))
                    await pipe.execute()
        except asyncio.CancelledError:
            self._stale = True
            raise
        except Exception as err:
            if not self._stale:
                log.warning("KV mirror not written (%r): the router falls back", err)
            self._stale = True
            return
        self._stale = False

    async def _delete(self) -> None:
        try:
            async with asyncio.timeout(1.0):
                await self.redis.delete(self.key)
        except Exception as err:  # it expires instead
            log.info("could not delete the KV mirror: %r", err)

"""How much of a prompt each worker's engine really holds in its KV cache: the prompt is
rendered to token ids as the worker will render it (`runtime.chat_template`), cut into
the engine's blocks and hashed as the engine hashes them (`runtime.kv_blocks`), and each
worker that follows its engine's KV events (`WorkerState.kv_blocks`) is asked, in one
pipelined Redis round trip, which of those blocks its mirror holds; a block counts only
when every block before it is held too (the engine reuses a prefix, not scattered blocks).

Workers without a mirror, and every worker when Redis does not answer in time, are left
out of the answer: the picker then uses its approximate index for them. Rendering costs
the CPU of one tokenization per turn, and only for pools with a mirrored worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from runtime.chat_template import encode_chat
from runtime.kv_blocks import block_hashes, held_prefix_blocks
from schemas.channels import RedisNames
from schemas.events import Message
from schemas.worker_state import WorkerState

log = logging.getLogger("turnstream.assembly.kv")

LOOKUP_TIMEOUT_S = 0.1


class KvLookup:
    def __init__(
        self,
        redis: Callable[[], Redis],
        names: RedisNames,
        tokenizer: Any,
        *,
        timeout_s: float = LOOKUP_TIMEOUT_S,
    ) -> None:
        self._redis = redis
        self.names = names
        self.tokenizer = tokenizer
        self.timeout_s = timeout_s
        self.failures = 0
        self._failing = False

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        return encode_chat(self.tokenizer, messages)

    async def held_tokens(
        self, pool: str, states: Sequence[WorkerState], messages: Sequence[Message], salt: str
    ) -> dict[str, int]:
        """Worker id -> prompt tokens its engine holds (in whole blocks), for the workers
        whose engine's cache is followed; {} when none is or Redis fails."""
        followed = [s for s in states if s.kv_blocks is not None]
        if not followed or not messages:
            return {}
        ids = self.prompt_ids(messages)
        hashes: dict[tuple[int, str], list[int]] = {}  # per (block size, seed): one hashing
        asked: list[tuple[WorkerState, int, list[int]]] = []  # (state, block size, blocks)
        for state in followed:
            kv = state.kv_blocks
            assert kv is not None
            scheme = (kv.block_size, kv.hash_seed)
            if scheme not in hashes:
                hashes[scheme] = block_hashes(ids, kv.block_size, seed=kv.hash_seed, salt=salt)
            if hashes[scheme]:
                asked.append((state, kv.block_size, hashes[scheme]))
        if not asked:  # shorter than a block: nobody holds a reusable block of it
            return {s.worker_id: 0 for s in followed}
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._redis().pipeline(transaction=False) as pipe:
                    for state, _, blocks in asked:
                        pipe.smismember(self.names.kv_blocks_key(pool, state.worker_id), blocks)
                    answers = await pipe.execute()
        except (RedisError, TimeoutError, OSError) as err:
            self.failures += 1
            if not self._failing:
                self._failing = True
                log.warning("KV mirrors unreadable (%r): approximate prefix routing", err)
            return {}
        self._failing = False
        held = {s.worker_id: 0 for s in followed}
        for (state, block_size, _), flags in zip(asked, answers, strict=True):
            held[state.worker_id] = held_prefix_blocks(flags) * block_size
        return held

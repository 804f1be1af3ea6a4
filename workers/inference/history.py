"""Per-conversation message history in Redis: a capped list with an idle TTL.

Enough for multi-turn chat; the assembly job of the multimodal issue replaces it with a
faust table plus truncation by tokens.
"""

from __future__ import annotations

import msgspec
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from schemas.channels import RedisNames
from schemas.events import Message

_decoder = msgspec.json.Decoder(Message)
_encoder = msgspec.json.Encoder()


class ConversationHistory:
    def __init__(self, redis: Redis, names: RedisNames, *, max_messages: int, ttl_s: int):
        self._redis = redis
        self._names = names
        self._max = max_messages
        self._ttl = ttl_s

    async def load(self, conversation_id: str) -> list[Message]:
        raw = await self._redis.lrange(self._names.history_key(conversation_id), 0, -1)
        return self.parse(raw)

    def queue_load(self, pipe: Pipeline, conversation_id: str) -> None:
        """Add the load to a caller's pipeline (saves a round trip); `parse` its result."""
        pipe.lrange(self._names.history_key(conversation_id), 0, -1)

    @staticmethod
    def parse(raw: list[bytes]) -> list[Message]:
        return [_decoder.decode(item) for item in raw]

    async def append(self, conversation_id: str, messages: list[Message]) -> None:
        key = self._names.history_key(conversation_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, *[_encoder.encode(m) for m in messages])
            pipe.ltrim(key, -self._max, -1)
            pipe.expire(key, self._ttl)
            await pipe.execute()

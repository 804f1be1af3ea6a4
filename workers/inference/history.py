"""Per-conversation message history in Redis: a capped list with an idle TTL.

Enough for multi-turn chat; the assembly job of the multimodal issue replaces it with a
faust table plus truncation by tokens.
"""

from __future__ import annotations

import logging

import msgspec
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from schemas.channels import RedisNames
from schemas.events import Message

log = logging.getLogger("turnstream.history")
_decoder = msgspec.json.Decoder(Message)
_encoder = msgspec.json.Encoder()


class ConversationHistory:
    def __init__(self, redis: Redis, names: RedisNames, *, max_messages: int, ttl_s: int):
        self._redis = redis
        self._names = names
        self._max = max_messages
        self._ttl = ttl_s

    async def load(self, tenant_id: str, conversation_id: str) -> list[Message]:
        key = self._names.history_key(tenant_id, conversation_id)
        return self.parse(await self._redis.lrange(key, 0, -1))

    def queue_load(self, pipe: Pipeline, tenant_id: str, conversation_id: str) -> None:
        """Add the load to a caller's pipeline (saves a round trip); `parse` its result."""
        pipe.lrange(self._names.history_key(tenant_id, conversation_id), 0, -1)

    @staticmethod
    def parse(raw: list[bytes]) -> list[Message]:
        """Decode stored messages; an unreadable entry is skipped, never fatal to a turn."""
        messages = []
        for item in raw:
            try:
                messages.append(_decoder.decode(item))
            except msgspec.DecodeError:
                log.warning("skipping an unreadable history entry")
        return messages

    def queue_append(
        self, pipe: Pipeline, tenant_id: str, conversation_id: str, messages: list[Message]
    ) -> None:
        """Add the append (capped, TTL refreshed) to a caller's transaction."""
        key = self._names.history_key(tenant_id, conversation_id)
        pipe.rpush(key, *[_encoder.encode(m) for m in messages])
        pipe.ltrim(key, -self._max, -1)
        pipe.expire(key, self._ttl)
        pipe.expire(self._names.owner_key(tenant_id, conversation_id), self._ttl)

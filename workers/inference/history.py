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

# KEYS: done, history, owner. ARGV: outcome, done ttl, max messages, history ttl, messages...
_RECORD_OUTCOME = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end
if #ARGV > 4 then
  redis.call('RPUSH', KEYS[2], unpack(ARGV, 5))
  redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
end
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('EXPIRE', KEYS[3], ARGV[4])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""
_decoder = msgspec.json.Decoder(Message)
_encoder = msgspec.json.Encoder()


class ConversationHistory:
    def __init__(self, redis: Redis, names: RedisNames, *, max_messages: int, ttl_s: int):
        self._redis = redis
        self._names = names
        self._max = max_messages
        self._ttl = ttl_s
        self._record = redis.register_script(_RECORD_OUTCOME)

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

    async def record_outcome(
        self,
        tenant_id: str,
        conversation_id: str,
        messages: list[Message],
        *,
        done_key: str,
        outcome: bytes,
        done_ttl_s: int,
    ) -> None:
        """Append the turn's messages and store its outcome, atomically and at most once:
        when the outcome is already stored (a retry after a lost reply), nothing changes."""
        await self._record(
            keys=[
                done_key,
                self._names.history_key(tenant_id, conversation_id),
                self._names.owner_key(tenant_id, conversation_id),
            ],
            args=[outcome, done_ttl_s, self._max, self._ttl]
            + [_encoder.encode(m) for m in messages],
        )

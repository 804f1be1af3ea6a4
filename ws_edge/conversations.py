"""Conversation ownership: the first principal to use a conversation id owns it.

One Redis round trip (`SET key owner NX GET`): nobody can add turns to, or read answers of,
someone else's conversation by guessing its id.
"""

from __future__ import annotations

from redis.asyncio import Redis

from schemas.channels import RedisNames


class ConversationClaims:
    def __init__(self, redis: Redis, names: RedisNames, ttl_s: int) -> None:
        self._redis = redis
        self._names = names
        self._ttl_s = ttl_s

    async def claim(self, tenant_id: str, conversation_id: str, owner: str) -> bool:
        """True when `owner` owns the conversation (now or already)."""
        key = self._names.owner_key(tenant_id, conversation_id)
        previous = await self._redis.set(key, owner, nx=True, get=True, ex=self._ttl_s)
        if previous is None:
            return True
        if previous.decode() != owner:
            return False
        await self._redis.expire(key, self._ttl_s)
        return True

"""Blacklisted users and message contents, checked in one Redis round trip per turn.

Storage: two sorted sets per namespace, `{prefix}:safety:blacklist:users` (user ids) and
`{prefix}:safety:blacklist:content` (sha256 hex of the normalised text, see `content_hash`),
each member scored by its expiry time (Unix seconds; +inf for a permanent entry). A check is
one pipeline of two ZSCOREs; an entry counts while its score is in the future. Expired
members are pruned on every add (ZREMRANGEBYSCORE), so the sets stay small without a sweeper.
A sorted set rather than one key per entry: one key to list, count, export or drop, and TTLs
per member without a key per member.

Hashing the normalised text makes a blacklisted message match again with other spacing,
case or leetspeak, and never stores the text itself.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from moderation.errors import BlacklistError


def content_hash(normalized: str) -> str:
    """The key a content entry is stored under: sha256 of the normalised text, hex."""
    return hashlib.sha256(normalized.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class BlacklistHit:
    user: bool = False
    content: bool = False

    @property
    def any(self) -> bool:
        return self.user or self.content


class Blacklist(Protocol):
    async def check(self, user_id: str | None, content_sha256: str | None) -> BlacklistHit: ...
    async def add_user(self, user_id: str, ttl_s: float | None = None) -> None: ...
    async def add_content(self, content_sha256: str, ttl_s: float | None = None) -> None: ...
    async def remove_user(self, user_id: str) -> None: ...
    async def remove_content(self, content_sha256: str) -> None: ...


def _expiry(now: float, ttl_s: float | None) -> float:
    if ttl_s is not None and ttl_s <= 0:
        raise ValueError("ttl_s must be positive (or None for a permanent entry)")
    return math.inf if ttl_s is None else now + ttl_s


class RedisBlacklist:
    """The shared blacklist; every Redis failure is raised as BlacklistError."""

    def __init__(
        self, redis: Redis, prefix: str = "ts", clock: Callable[[], float] = time.time
    ) -> None:
        self._redis = redis
        self.users_key = f"{prefix}:safety:blacklist:users"
        self.content_key = f"{prefix}:safety:blacklist:content"
        self._clock = clock

    async def check(self, user_id: str | None, content_sha256: str | None) -> BlacklistHit:
        if not user_id and not content_sha256:
            return BlacklistHit()
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zscore(self.users_key, user_id or "")
                pipe.zscore(self.content_key, content_sha256 or "")
                user_exp, content_exp = await pipe.execute()
        except RedisError as err:
            raise BlacklistError(f"blacklist check failed: {err!r}") from err
        now = self._clock()
        return BlacklistHit(
            user=bool(user_id) and user_exp is not None and float(user_exp) > now,
            content=bool(content_sha256) and content_exp is not None and float(content_exp) > now,
        )

    async def _add(self, key: str, member: str, ttl_s: float | None) -> None:
        now = self._clock()
        expiry = _expiry(now, ttl_s)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zremrangebyscore(key, "-inf", now)
                pipe.zadd(key, {member: expiry})
                await pipe.execute()
        except RedisError as err:
            raise BlacklistError(f"blacklist update failed: {err!r}") from err

    async def _remove(self, key: str, member: str) -> None:
        try:
            await self._redis.zrem(key, member)
        except RedisError as err:
            raise BlacklistError(f"blacklist update failed: {err!r}") from err

    async def add_user(self, user_id: str, ttl_s: float | None = None) -> None:
        await self._add(self.users_key, user_id, ttl_s)

    async def add_content(self, content_sha256: str, ttl_s: float | None = None) -> None:
        await self._add(self.content_key, content_sha256, ttl_s)

    async def remove_user(self, user_id: str) -> None:
        await self._remove(self.users_key, user_id)

    async def remove_content(self, content_sha256: str) -> None:
        await self._remove(self.content_key, content_sha256)


class MemoryBlacklist:
    """The same semantics in a dict, for unit tests of the screening logic and offline runs."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._users: dict[str, float] = {}
        self._content: dict[str, float] = {}
        self._clock = clock

    async def check(self, user_id: str | None, content_sha256: str | None) -> BlacklistHit:
        now = self._clock()
        return BlacklistHit(
            user=bool(user_id) and self._users.get(user_id or "", -math.inf) > now,
            content=bool(content_sha256)
            and self._content.get(content_sha256 or "", -math.inf) > now,
        )

    async def add_user(self, user_id: str, ttl_s: float | None = None) -> None:
        self._users[user_id] = _expiry(self._clock(), ttl_s)

    async def add_content(self, content_sha256: str, ttl_s: float | None = None) -> None:
        self._content[content_sha256] = _expiry(self._clock(), ttl_s)

    async def remove_user(self, user_id: str) -> None:
        self._users.pop(user_id, None)

    async def remove_content(self, content_sha256: str) -> None:
        self._content.pop(content_sha256, None)

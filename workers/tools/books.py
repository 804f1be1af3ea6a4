"""The exactly-once books of deployment tool calls, in Redis (the rules: `book_rules`).

One key per call (`RedisNames.tool_book_key(idempotency key)`), claimed with SET NX GET
(one round trip: ours, or what was there), replaced with the result once the call ran.
Taking over a dead claim is a compare-and-set (a Lua script), so two workers that both
find it dead do not both act on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from redis.asyncio import Redis

from schemas.channels import RedisNames
from workers.tools.book_rules import BookEntry, BookState, decode_entry, encode_entry

BOOK_TTL_S = 7 * 24 * 3600  # as long as the turn's topics keep it: a replay finds the book
WAIT_POLL_S = 0.2

# KEYS[1] the book; ARGV[1] the entry expected there, ARGV[2] the new one, ARGV[3] the TTL
_SWAP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
"""


class ToolBooks:
    def __init__(self, redis: Redis, names: RedisNames) -> None:
        self._redis = redis
        self._names = names
        self._swap = redis.register_script(_SWAP)

    async def claim(self, key: str, entry: BookEntry) -> tuple[BookEntry | None, bytes | None]:
        """Claim the call; (None, None) when the claim is ours, else (what is there, its
        bytes, for `take_over`)."""
        raw = await self._redis.set(
            self._names.tool_book_key(key), encode_entry(entry), nx=True, get=True, ex=BOOK_TTL_S
        )
        found = cast(bytes | None, raw)
        return decode_entry(found), found

    async def record(self, key: str, entry: BookEntry) -> None:
        await self._redis.set(self._names.tool_book_key(key), encode_entry(entry), ex=BOOK_TTL_S)

    async def take_over(self, key: str, seen: bytes, entry: BookEntry) -> bool:
        """Replace the dead claim `seen` with `entry`; False when another worker was first."""
        swapped = await self._swap(
            keys=[self._names.tool_book_key(key)], args=[seen, encode_entry(entry), BOOK_TTL_S]
        )
        return bool(swapped)

    async def wait_done(
        self, key: str, until_ms: float, clock_ms: Callable[[], float]
    ) -> tuple[BookEntry | None, bytes | None]:
        """Poll until the call's result is recorded or `until_ms` passes; the last entry
        seen (and its bytes)."""
        book = self._names.tool_book_key(key)
        while True:
            raw = cast(bytes | None, await self._redis.get(book))
            entry = decode_entry(raw)
            if entry is None or entry.state == BookState.DONE or clock_ms() >= until_ms:
                return entry, raw
            await asyncio.sleep(WAIT_POLL_S)

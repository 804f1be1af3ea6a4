"""The Redis blacklist against the real local Redis (started by the `services` fixture)."""

from __future__ import annotations

import time

import pytest

from moderation.blacklist import RedisBlacklist, content_hash
from moderation.errors import BlacklistError
from moderation.screen import InputScreen
from runtime.redis import redis_client
from schemas.channels import RedisNames

pytestmark = pytest.mark.integration


@pytest.fixture
async def redis_blacklist(services, session_namespace):
    redis = redis_client(services.redis_url)
    prefix = RedisNames.for_namespace(f"{session_namespace}-safety").prefix
    now = [time.time()]
    blacklist = RedisBlacklist(redis, prefix, clock=lambda: now[0])
    try:
        yield blacklist, redis, now
    finally:
        await redis.delete(blacklist.users_key, blacklist.content_key)
        await redis.aclose()


async def test_redis_blacklist_users_content_ttl_and_removal(redis_blacklist):
    blacklist, redis, now = redis_blacklist
    digest = content_hash("spam spam")
    assert not (await blacklist.check("u1", digest)).any

    await blacklist.add_user("u1")
    await blacklist.add_content(digest, ttl_s=30)
    hit = await blacklist.check("u1", digest)
    assert hit.user and hit.content
    assert (await blacklist.check("u2", None)).any is False
    assert blacklist.users_key.endswith(":safety:blacklist:users")
    assert await redis.zscore(blacklist.users_key, "u1") == float("inf")

    now[0] += 31  # the content entry expired, the permanent user entry did not
    hit = await blacklist.check("u1", digest)
    assert hit.user and not hit.content
    assert await redis.zscore(blacklist.content_key, digest) is not None
    await blacklist.add_content(content_hash("other"), ttl_s=5)  # an add prunes expired ones
    assert await redis.zscore(blacklist.content_key, digest) is None

    await blacklist.remove_user("u1")
    assert not (await blacklist.check("u1", None)).user


async def test_screen_with_redis_blacklist(redis_blacklist):
    blacklist, _, _ = redis_blacklist
    await blacklist.add_user("banned")
    screen = InputScreen(blacklist=blacklist)
    assert (await screen.screen("hello", user_id="banned")).labels == ("blacklisted_user",)
    assert not (await screen.screen("hello", user_id="someone")).stopped


async def test_unreachable_redis_raises_blacklist_error():
    redis = redis_client("redis://127.0.0.1:1/0", wait_s=0.2)
    try:
        with pytest.raises(BlacklistError):
            await RedisBlacklist(redis, "x").check("u", None)
    finally:
        await redis.aclose()

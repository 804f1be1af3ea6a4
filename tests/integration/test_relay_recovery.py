"""The edge's relay after a lost subscription: outcomes published while it was away are
read back from their done keys (real Redis)."""

from __future__ import annotations

import uuid

import pytest

from schemas.channels import RedisNames, redis_client
from schemas.codec import encode
from tests.support import factories
from ws_edge.relay import RelaySubscriber

pytestmark = pytest.mark.integration


async def test_missed_outcomes_are_recovered_after_a_resubscribe(services, session_namespace):
    names = RedisNames.for_namespace(f"{session_namespace}-relay")
    redis = redis_client(services.redis_url)
    relay = RelaySubscriber(redis, names.edge_channel("e1"), names.done_key)
    waiting, other = uuid.uuid4().hex, uuid.uuid4().hex
    delivered = []

    def deliver(event, position) -> None:
        delivered.append((event, position))

    relay.route(waiting, deliver)
    relay.route(other, deliver)
    completed = factories.completed(waiting, text="the whole answer")
    try:
        await redis.set(names.done_key(waiting), encode(completed), ex=60)
        await relay._recover_outcomes()
    finally:
        await redis.delete(names.done_key(waiting))
        await redis.aclose()
    assert delivered == [(completed, None)]  # the other turn is still running: nothing for it

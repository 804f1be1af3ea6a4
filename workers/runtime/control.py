"""The control channel as a stream of events (cancel, barge-in, safety cut): what the TTS
and image workers listen to while they work. Undecodable messages are logged and skipped;
the subscription is closed when the consumer stops iterating."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from redis.asyncio import Redis

from schemas.codec import decode
from schemas.errors import DecodeError
from schemas.events import AnyEvent

log = logging.getLogger("turnstream.control")


async def control_events(
    redis: Redis,
    channel: str,
    on_subscribed: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[AnyEvent]:
    """Events published on `channel`; `on_subscribed` runs once the subscription is in
    place (to re-check what may have been missed before it)."""
    pubsub = redis.pubsub()
    try:
        await pubsub.subscribe(channel)
        if on_subscribed is not None:
            await on_subscribed()
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is None or message["type"] != "message":
                continue
            try:
                yield decode(message["data"])
            except DecodeError as err:
                log.warning("bad control message: %s", err)
    finally:
        with contextlib.suppress(Exception):
            await pubsub.aclose()

"""The edge's side of the relay: one Redis subscription per edge node, routed by turn id.

Workers publish every frame of a turn to the channel of the edge that accepted it
(`TurnSubmitted.edge_id`), so an edge reads only its own traffic, with one connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from schemas.codec import decode_batch
from schemas.errors import DecodeError
from schemas.events import AnyEvent

log = logging.getLogger("turnstream.edge.relay")

Deliver = Callable[[AnyEvent], None]


class RelaySubscriber:
    def __init__(self, redis: Redis, channel: str) -> None:
        self._redis = redis
        self._channel = channel
        self._routes: dict[str, Deliver] = {}
        self.subscribed = asyncio.Event()
        self.unrouted = 0

    def route(self, turn_id: str, deliver: Deliver) -> None:
        self._routes[turn_id] = deliver

    def unroute(self, turn_id: str) -> None:
        self._routes.pop(turn_id, None)

    async def run(self) -> None:
        while True:
            try:
                await self._follow()
            except RedisError:
                self.subscribed.clear()
                log.warning("relay subscription lost; resubscribing", exc_info=True)
                await asyncio.sleep(0.5)

    async def _follow(self) -> None:
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(self._channel)
            self.subscribed.set()
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
                if message is None or message["type"] != "message":
                    continue
                self._dispatch(message["data"])
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    def _dispatch(self, payload: bytes) -> None:
        try:
            events = decode_batch(payload)
        except DecodeError as err:
            log.warning("dropping undecodable relay message: %s", err)
            return
        for event in events:
            deliver = self._routes.get(event.turn_id)
            if deliver is None:
                self.unrouted += 1  # the client left; the worker still records the answer
                continue
            deliver(event)

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

from schemas.codec import decode_batch, encode_batch
from schemas.errors import DecodeError
from schemas.events import AnyEvent

log = logging.getLogger("turnstream.edge.relay")

Deliver = Callable[[AnyEvent], None]


class RelaySubscriber:
    def __init__(self, redis: Redis, channel: str, done_key: Callable[[str], str]) -> None:
        self._redis = redis
        self._channel = channel
        self._done_key = done_key
        self._routes: dict[str, Deliver] = {}
        self.subscribed = asyncio.Event()

    def route(self, turn_id: str, deliver: Deliver) -> None:
        self._routes[turn_id] = deliver

    def unroute(self, turn_id: str, deliver: Deliver) -> None:
        """Remove the route only if it is still the caller's: a client that reconnected and
        re-attached to the same turn (same client_turn_id) must keep its new route."""
        if self._routes.get(turn_id) == deliver:
            del self._routes[turn_id]

    async def run(self) -> None:
        first = True
        while True:
            try:
                await self._follow(recover=not first)
            except RedisError:
                self.subscribed.clear()
                log.warning("relay subscription lost; resubscribing", exc_info=True)
                await asyncio.sleep(0.5)
            first = False

    async def _follow(self, *, recover: bool) -> None:
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(self._channel)
            self.subscribed.set()
            if recover:
                await self._recover_outcomes()
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
                if message is None or message["type"] != "message":
                    continue
                self._dispatch(message["data"])
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def _recover_outcomes(self) -> None:
        """Pub/sub drops what is published while nobody listens: after a resubscribe, the
        recorded outcome of every turn still waiting here is delivered from its done key.
        (Token frames lost in the gap are not; the final text in `response.done` is whole.)"""
        turn_ids = list(self._routes)
        if not turn_ids:
            return
        recorded = await self._redis.mget([self._done_key(t) for t in turn_ids])
        found = [r for r in recorded if r is not None]
        if found:
            log.info("recovered %d outcomes missed while resubscribing", len(found))
        for outcome in found:  # one at a time: an unreadable one must not hide the others
            self._dispatch(encode_batch([outcome]))

    def _dispatch(self, payload: bytes) -> None:
        try:
            events = decode_batch(payload)
        except DecodeError as err:
            log.warning("dropping undecodable relay message: %s", err)
            return
        for event in events:
            deliver = self._routes.get(event.turn_id)
            if deliver is None:
                continue  # the client left; the worker still records the answer
            try:
                deliver(event)
            except Exception:  # one connection's bug must not stop the edge's relay
                log.exception("delivering %s failed", type(event).__name__)

"""The edge's side of the relay: one Redis subscription per edge node, routed by turn id.

Workers publish every frame of a turn to the channel of the edge that accepted it
(`TurnSubmitted.edge_id`), and to every edge that watches it (a client resumed or joined
there), so an edge reads only its own traffic, with one connection. Logged frames come with
their position in the turn's log (`schemas.turn_log`). Several connections may follow one
turn (two tabs of the same user on this edge): each route gets every frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from schemas.errors import DecodeError
from schemas.events import AnyEvent
from schemas.turn_log import LogPosition, decode_relay_message

log = logging.getLogger("turnstream.edge.relay")

Deliver = Callable[[AnyEvent, LogPosition | None], None]


class RelaySubscriber:
    def __init__(self, redis: Redis, channel: str, done_key: Callable[[str], str]) -> None:
        self._redis = redis
        self.channel = channel
        self._done_key = done_key
        self._routes: dict[str, list[Deliver]] = {}
        self.subscribed = asyncio.Event()

    def route(self, turn_id: str, deliver: Deliver) -> None:
        routes = self._routes.setdefault(turn_id, [])
        if deliver not in routes:
            routes.append(deliver)

    def unroute(self, turn_id: str, deliver: Deliver) -> None:
        """Remove this caller's route only: another connection following the same turn (a
        reconnect, a second tab) keeps its own."""
        routes = self._routes.get(turn_id)
        if routes is not None and deliver in routes:
            routes.remove(deliver)
            if not routes:
                del self._routes[turn_id]

    def routed(self, turn_id: str) -> bool:
        return turn_id in self._routes

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
            await pubsub.subscribe(self.channel)
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
            self._dispatch(b"[" + outcome + b"]")

    def _dispatch(self, payload: bytes) -> None:
        try:
            frames = decode_relay_message(payload)
        except DecodeError as err:
            log.warning("dropping undecodable relay message: %s", err)
            return
        for event, position in frames:
            self.deliver(event, position)

    def deliver(self, event: AnyEvent, position: LogPosition | None) -> None:
        """Hand one frame to every connection following its turn (none: the client left;
        the worker still records the answer)."""
        for deliver in list(self._routes.get(event.turn_id, ())):
            try:
                deliver(event, position)
            except Exception:  # one connection's bug must not stop the edge's relay
                log.exception("delivering %s failed", type(event).__name__)

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
from schemas.turn_log import LogPosition, decode_entries, decode_relay_message

log = logging.getLogger("turnstream.edge.relay")

Deliver = Callable[[AnyEvent, LogPosition | None], None]


class RelaySubscriber:
    def __init__(
        self,
        redis: Redis,
        channel: str,
        done_key: Callable[[str], str],
        log_key: Callable[[str], str] | None = None,
    ) -> None:
        """`log_key`: where a turn's log is (`RedisNames.turn_log_key`); with it, a
        resubscribe replays the logs of the turns routed here, not only their outcomes."""
        self._redis = redis
        self.channel = channel
        self._done_key = done_key
        self._log_key = log_key
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
        """Pub/sub drops what is published while nobody listens: after a resubscribe, every
        turn still routed here gets its log again, from its start (each connection drops
        the frames it already has by their positions, as after a resume: the subscription
        is up before the read, so every frame is in the read or arrives live), then its
        recorded outcome from its done key when the log holds none (the log expired).
        Without `log_key` only the outcomes: token frames lost in the gap are not
        recovered, and the client's deltas miss text that `response.done` has.

        Found by the fault suite (`python -m bench.faults --scenarios redis-restart`):
        answers streaming while Redis restarted reached their clients as
        `response.started` then `response.done`, none of their deltas.

        A log without the completion is a turn whose last frames are still on their way:
        the worker marks the turn done (its done key) *before* its relay, retrying through
        the same outage, has logged the last tokens and the completion, which arrive live
        (this subscription is up). So the done key answers only a turn with no log at all;
        answering it from the done key too cut one answer's deltas short in CI's
        redis-restart (2026-12-05: the client got 4 deltas and then `response.done`)."""
        turn_ids = list(self._routes)
        if not turn_ids:
            return
        logs: list[list] = [[] for _ in turn_ids]
        if self._log_key is not None:
            async with self._redis.pipeline(transaction=False) as pipe:
                for turn_id in turn_ids:
                    pipe.xrange(self._log_key(turn_id), "-", "+")
                logs = await pipe.execute()
        recorded = await self._redis.mget([self._done_key(t) for t in turn_ids])
        replayed = outcomes = 0
        for raw_log, outcome in zip(logs, recorded, strict=True):
            entries = decode_entries(raw_log)
            for event, position in entries:
                self.deliver(event, position)
            replayed += len(entries)
            if outcome is not None and not entries:  # the log expired (or never was)
                outcomes += 1  # one at a time: an unreadable one must not hide the others
                self._dispatch(b"[" + outcome + b"]")
        if replayed or outcomes:
            log.info(
                "recovered %d logged frames and %d outcomes after resubscribing",
                replayed,
                outcomes,
            )

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

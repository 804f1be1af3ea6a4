"""Answers their users walked away from: a client that leaves while a turn's answer is
unfinished and resumes none of it within `TURNSTREAM_ABANDON_WINDOW_S` abandoned it, and
the edge records `abandon` feedback for it, marked `inferred` (quality_daily's
abandon_rate counts it with the clients' own).

The edge the client left marks each unfinished turn in Redis (`left_key`: who, which
conversation, when) and puts it in the namespace's departures (a sorted set scored by the
end of its window); a resume on any edge deletes the mark. Every edge sweeps the
departures that are due: the one whose ZREM removes an entry concludes it, taking the mark
with a GETDEL (none: the client came back), so one conclusion is drawn per departure even
when the edge that saw it stopped meanwhile. The feedback's time is the departure's, so a
repeat collapses in the table.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from producers.turn_publisher import TurnPublisher
from runtime.cancelling import cancel_and_wait
from schemas.channels import RedisNames
from schemas.events import FeedbackGiven, FeedbackKind

log = logging.getLogger("turnstream.edge")

MAX_SWEEP_EVERY_S = 5.0
SWEEP_BATCH = 500


class Departure(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the mark holds: enough to write the feedback without the session."""

    turn_id: str
    conversation_id: str
    tenant_id: str
    user_id: str
    left_at_ms: float
    window_s: float  # the window of the edge it left (another edge may conclude it)


_decoder = msgspec.json.Decoder(Departure)


def abandoned(departure: Departure) -> FeedbackGiven:
    return FeedbackGiven(
        turn_id=departure.turn_id,
        conversation_id=departure.conversation_id,
        tenant_id=departure.tenant_id,
        user_id=departure.user_id,
        kind=FeedbackKind.ABANDON,
        given_at_ms=departure.left_at_ms,
        comment=f"left during the answer, not resumed within {departure.window_s:g} s",
        inferred=True,
    )


class Abandonment:
    def __init__(
        self,
        *,
        redis: Redis,
        names: RedisNames,
        publisher: TurnPublisher,
        feedback_topic: str,
        window_s: float,
        clock_ms: Callable[[], float],
    ) -> None:
        self._redis = redis
        self._names = names
        self._publisher = publisher
        self._topic = feedback_topic
        self.window_s = window_s
        self._clock_ms = clock_ms
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        self.inferred = 0  # abandonments this edge concluded

    def start(self) -> None:
        if self.window_s > 0:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="edge-abandonment")

    async def left(self, departures: list[Departure]) -> None:
        """The client went with these turns unfinished: mark them, due when their window
        ends."""
        if self.window_s <= 0 or not departures or self._closed:
            return  # (closed: the edge is stopping and closing its clients, not they leaving)
        ttl_s = int(self.window_s) + 600  # outlives the sweep, even one held up for minutes
        due = {d.turn_id: d.left_at_ms + d.window_s * 1000 for d in departures}
        try:
            async with asyncio.timeout(2.0), self._redis.pipeline(transaction=False) as pipe:
                for departure in departures:
                    mark = msgspec.json.encode(departure)
                    pipe.set(self._names.left_key(departure.turn_id), mark, ex=ttl_s)
                pipe.zadd(self._names.departures_key(), due)
                await pipe.execute()
        except (RedisError, TimeoutError) as exc:
            log.warning("%d departures not marked (%r): none inferred", len(departures), exc)

    async def returned(self, turn_id: str) -> None:
        """A resume of the turn (on any edge): its client came back."""
        if self.window_s <= 0:
            return
        try:
            await self._redis.delete(self._names.left_key(turn_id))
        except RedisError as exc:
            log.warning("cannot clear the departure of %s (%r)", turn_id, exc)

    async def sweep(self) -> int:
        """Conclude the departures that are due; how many were abandoned."""
        key = self._names.departures_key()
        due = await self._redis.zrangebyscore(key, "-inf", self._clock_ms(), 0, SWEEP_BATCH)
        concluded = 0
        for member in due:
            if not await self._redis.zrem(key, member):
                continue  # another edge took it
            turn_id = member.decode() if isinstance(member, bytes) else str(member)
            raw = await self._redis.getdel(self._names.left_key(turn_id))
            if raw is None:
                continue  # resumed meanwhile
            await self._publisher.publish(abandoned(_decoder.decode(raw)), self._topic)
            concluded += 1
        self.inferred += concluded
        return concluded

    async def _sweep_forever(self) -> None:
        every_s = min(max(self.window_s / 4, 0.2), MAX_SWEEP_EVERY_S)
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.sweep()
            except Exception as exc:  # Kafka or Redis away: the departures wait for the next
                log.warning("abandonment sweep failed (%r)", exc)

    async def close(self) -> None:
        """Before the edge closes its connections: those departures are the edge's."""
        self._closed = True
        if self._sweeper is not None:
            await cancel_and_wait([self._sweeper])

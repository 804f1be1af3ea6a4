"""Answers their users walked away from: a client that leaves while a turn's answer is
unfinished and resumes none of it within `TURNSTREAM_ABANDON_WINDOW_S` abandoned it, and
the edge records `abandon` feedback for it, marked `inferred` (quality_daily's
abandon_rate counts it with the clients' own).

The edge the client left marks each unfinished turn in Redis (`left_key`: who, which
conversation, when) and looks again once the window passed; a resume on any edge deletes
the mark. Taking the mark is a GETDEL, so one conclusion is drawn per departure, and the
feedback's time is the departure's, so a repeat collapses in the table. An edge that stops
inside the window draws no conclusion for the turns it was watching (they count as not
abandoned).
"""

from __future__ import annotations

import asyncio
import logging

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from producers.turn_publisher import TurnPublisher
from runtime.cancelling import cancel_and_wait
from schemas.channels import RedisNames
from schemas.events import FeedbackGiven, FeedbackKind

log = logging.getLogger("turnstream.edge")


class Departure(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the mark holds: enough to write the feedback without the session."""

    turn_id: str
    conversation_id: str
    tenant_id: str
    user_id: str
    left_at_ms: float


_decoder = msgspec.json.Decoder(Departure)


def abandoned(departure: Departure, window_s: float) -> FeedbackGiven:
    return FeedbackGiven(
        turn_id=departure.turn_id,
        conversation_id=departure.conversation_id,
        tenant_id=departure.tenant_id,
        user_id=departure.user_id,
        kind=FeedbackKind.ABANDON,
        given_at_ms=departure.left_at_ms,
        comment=f"left during the answer, not resumed within {window_s:g} s",
        inferred=True,
    )


class Abandonment:
    def __init__(
        self,
        redis: Redis,
        names: RedisNames,
        publisher: TurnPublisher,
        feedback_topic: str,
        window_s: float,
    ) -> None:
        self._redis = redis
        self._names = names
        self._publisher = publisher
        self._topic = feedback_topic
        self.window_s = window_s
        self._tasks: set[asyncio.Task[None]] = set()
        self.inferred = 0  # abandonments recorded by this edge

    async def left(self, departures: list[Departure]) -> None:
        """The client went with these turns unfinished: mark them, look again later."""
        if self.window_s <= 0 or not departures:
            return
        ttl_s = int(self.window_s) + 60  # outlives the look, not much more
        try:
            async with asyncio.timeout(2.0), self._redis.pipeline(transaction=False) as pipe:
                for departure in departures:
                    mark = msgspec.json.encode(departure)
                    pipe.set(self._names.left_key(departure.turn_id), mark, ex=ttl_s)
                await pipe.execute()
        except (RedisError, TimeoutError) as exc:
            log.warning(
                "cannot mark %d departures (%r): no abandonment inferred", len(departures), exc
            )
            return
        for departure in departures:
            task = asyncio.create_task(self._look_again(departure.turn_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def returned(self, turn_id: str) -> None:
        """A resume of the turn (on any edge): its client came back."""
        if self.window_s <= 0:
            return
        try:
            await self._redis.delete(self._names.left_key(turn_id))
        except RedisError as exc:
            log.warning("cannot clear the departure of %s (%r)", turn_id, exc)

    async def _look_again(self, turn_id: str) -> None:
        await asyncio.sleep(self.window_s)
        try:
            raw = await self._redis.getdel(self._names.left_key(turn_id))
            if raw is None:
                return  # resumed meanwhile (or the mark expired)
            feedback = abandoned(_decoder.decode(raw), self.window_s)
            await self._publisher.publish(feedback, self._topic)
            self.inferred += 1
        except Exception as exc:  # one turn's inference is not worth the edge
            log.warning("abandonment of %s not recorded (%r)", turn_id, exc)

    async def close(self) -> None:
        await cancel_and_wait(list(self._tasks))

"""A steady load of conversations whose clients keep a history of everything they see.

Each user holds one WebSocket connection (`ws_edge.client.EdgeClient`) and has multi-turn
conversations, one turn at a time, paced so that all users together create about
`turns_per_s` turns a second. A user behaves as the protocol tells a client to:

- a turn refused with a retryable error (`broker_unavailable`, `store_unavailable`,
  `overloaded`) is sent again with the same `client_turn_id` (the same turn, answered once)
  after a backoff, until the turn's deadline;
- a lost connection is reopened on the next edge; an accepted turn is then followed again
  with `response.resume` from the last log position the user received (another edge
  resumes any of the user's answers), a turn not yet accepted is sent again with its
  `client_turn_id`.

Everything goes into the turn's `TurnHistory` (`bench.faults.books`), judged afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.protocol import State

from bench.faults.books import Kind, TurnHistory
from schemas.turn_log import LogPosition
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.messages import (
    AnyServerEvent,
    ErrorEvent,
    ResponseDelta,
    ResponseDone,
    ResponseRestarted,
    ResponseStarted,
)

T = TypeVar("T")
TENANT = "bench"  # the dev registry's tenant with limits no load here reaches
FILLER = [
    "please",
    "tell",
    "me",
    "something",
    "about",
    "rivers",
    "mountains",
    "and",
    "the",
    "weather",
    "in",
    "spring",
    "in",
    "the",
    "hills",
]


class Disconnected(Exception):
    """The connection to the edge is gone (or stopped answering)."""


@dataclass(frozen=True, slots=True)
class LoadConfig:
    users: int = 8
    turns_per_s: float = 4.0
    turns_per_conversation: int = 3
    question_words: int = 30  # the fake engine echoes them: ~1 s of answer at 20 ms a token
    turn_deadline_s: float = 150.0  # a client waits this long for a turn's end, then gives up
    retry_backoff_s: float = 0.5


class Clock:
    """Seconds since the run started (every history of a run on one axis)."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.start


def question(user: str, conversation_id: str, index: int, words: int) -> str:
    """A question nobody asked before (no cache answers it), about `words` words long."""
    head = f"{user} {conversation_id[-6:]} turn {index}:"
    filler = [FILLER[i % len(FILLER)] for i in range(max(words - 4, 1))]
    return " ".join([head, *filler])


async def _raced(client: EdgeClient, call: Awaitable[T]) -> T:
    """`call`, unless the connection closes first (`Disconnected`)."""
    task = asyncio.ensure_future(call)
    closed = asyncio.ensure_future(client.websocket.wait_closed())
    try:
        await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise Disconnected
    except (ConnectionClosed, OSError) as err:
        raise Disconnected from err
    except TimeoutError as err:  # no answer to turn.create: treat the edge as gone
        raise Disconnected from err
    finally:
        for pending in (task, closed):
            if not pending.done():
                pending.cancel()
        await asyncio.gather(task, closed, return_exceptions=True)


class User:
    """One simulated user: its connection, its conversations, its turns' histories."""

    def __init__(  # noqa: PLR0917
        self,
        name: str,
        urls: list[str],
        auth_secret: str,
        scenario: str,
        config: LoadConfig,
        clock: Clock,
        histories: list[TurnHistory],
        first_edge: int = 0,
    ) -> None:
        self.name = name
        self.urls = urls
        self.token = mint_token(auth_secret, name, TENANT)
        self.scenario = scenario
        self.config = config
        self.clock = clock
        self.histories = histories
        self.edge = first_edge
        self.client: EdgeClient | None = None
        self._connection: contextlib.AsyncExitStack | None = None
        self.connections = 0

    # ---- the connection --------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.urls[self.edge % len(self.urls)]

    async def _connected(self, deadline: float) -> EdgeClient:
        while self.client is None:
            if self.clock.now() > deadline:
                raise TimeoutError("no edge answered")
            url = self.url
            stack = contextlib.AsyncExitStack()
            try:
                self.client = await stack.enter_async_context(EdgeClient.connect(url, self.token))
                self._connection = stack
                self.connections += 1
            except (OSError, ConnectionClosed, InvalidHandshake, TurnRejected, TimeoutError):
                await stack.aclose()
                self.edge += 1  # that edge is down: the next one
                await asyncio.sleep(self.config.retry_backoff_s)
        return self.client

    async def _drop(self) -> None:
        """Forget a dead connection; the next one goes to the next edge."""
        stack, self._connection, self.client = self._connection, None, None
        self.edge += 1
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    async def close(self) -> None:
        stack, self._connection, self.client = self._connection, None, None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    # ---- the load --------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, start_delay_s: float = 0.0) -> None:
        interval = self.config.users / self.config.turns_per_s
        await asyncio.sleep(start_delay_s)
        try:
            while not stop.is_set():
                conversation = f"c-{self.name}-{uuid.uuid4().hex[:8]}"
                for index in range(1, self.config.turns_per_conversation + 1):
                    if stop.is_set():
                        break
                    began = time.monotonic()
                    await self.turn(conversation, index)
                    pause = interval - (time.monotonic() - began)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), max(pause, 0.0))
        finally:
            await self.close()

    async def turn(self, conversation_id: str, index: int) -> TurnHistory:
        now = self.clock.now
        history = TurnHistory(
            self.scenario, self.name, conversation_id, uuid.uuid4().hex[:16], index, now()
        )
        self.histories.append(history)
        deadline = history.created_at + self.config.turn_deadline_s
        text = question(self.name, conversation_id, index, self.config.question_words)
        try:
            turn_id = await self._create(history, text, deadline)
            if turn_id is not None:
                await self._follow(history, turn_id, deadline)
        except TimeoutError:
            history.add(now(), Kind.GAVE_UP)
        return history

    async def _create(self, history: TurnHistory, text: str, deadline: float) -> str | None:
        """Until the edge accepts the turn (its id) or refuses it for good (None)."""
        now = self.clock.now
        while True:
            if now() > deadline:
                raise TimeoutError
            client = await self._connected(deadline)
            history.add(now(), Kind.CREATE)
            try:
                turn_id = await _raced(
                    client,
                    client.start_turn(
                        history.conversation_id, text, client_turn_id=history.client_turn_id
                    ),
                )
            except TurnRejected as rejected:
                error = rejected.error
                history.turn_id = history.turn_id or error.turn_id
                history.add(now(), Kind.REFUSED, code=error.code)
                if not error.retryable:
                    return None
                wait_ms = error.retry_after_ms or 1000 * self.config.retry_backoff_s
                await asyncio.sleep(wait_ms / 1000 * (1 + random.random()))
                continue
            except Disconnected:
                history.add(now(), Kind.DISCONNECTED)
                await self._drop()
                continue
            history.turn_id = turn_id
            history.edge = self.url
            history.add(now(), Kind.ACCEPTED)
            return turn_id

    async def _follow(self, history: TurnHistory, turn_id: str, deadline: float) -> None:
        """Its frames until `response.done`, resuming on another edge when the connection
        drops; returns early on a resume refused for good (a clear error)."""
        now = self.clock.now
        last: LogPosition | None = None
        client = await self._connected(deadline)
        while True:
            try:
                async for event in self._frames(client, turn_id, deadline):
                    position = _position_of(event)
                    last = position or last
                    _record(history, event, now())
                    if isinstance(event, ResponseDone):
                        return
            except Disconnected:
                history.add(now(), Kind.DISCONNECTED)
                await self._drop()
                client = await self._resume(history, turn_id, last, deadline)
                if client is None:
                    return

    async def _resume(
        self, history: TurnHistory, turn_id: str, after: LogPosition | None, deadline: float
    ) -> EdgeClient | None:
        now = self.clock.now
        while True:
            client = await self._connected(deadline)
            try:
                resumed = await _raced(client, client.resume(turn_id, after=after))
            except TurnRejected as rejected:
                history.add(now(), Kind.RESUME_REFUSED, code=rejected.error.code)
                if not rejected.error.retryable:
                    return None
                await asyncio.sleep(self.config.retry_backoff_s)
                continue
            except Disconnected:
                history.add(now(), Kind.DISCONNECTED)
                await self._drop()
                continue
            history.edge = self.url
            history.add(
                now(), Kind.RESUMED, code=resumed.status, epoch=resumed.epoch, offset=resumed.offset
            )
            return client

    async def _frames(self, client: EdgeClient, turn_id: str, deadline: float):
        """The turn's frames; `Disconnected` as soon as the connection is gone (polled each
        second: `EdgeClient.events` alone would wait out its whole timeout)."""
        while True:
            try:
                async for event in client.events(turn_id, wait_s=1.0):
                    yield event
                return
            except TimeoutError:
                if client.websocket.state is State.CLOSED:
                    raise Disconnected from None
                if self.clock.now() > deadline:
                    raise


def _position_of(event: AnyServerEvent) -> LogPosition | None:
    epoch, offset = getattr(event, "epoch", None), getattr(event, "offset", None)
    return LogPosition(epoch, offset) if epoch is not None and offset is not None else None


def _record(history: TurnHistory, event: AnyServerEvent, at: float) -> None:
    match event:
        case ResponseStarted():
            history.add(at, Kind.STARTED, epoch=event.epoch, offset=event.offset)
        case ResponseDelta():
            history.add(at, Kind.DELTA, epoch=event.epoch, offset=event.offset, text=event.text)
        case ResponseRestarted():
            history.add(at, Kind.RESTARTED, epoch=event.epoch, code=event.reason)
        case ResponseDone():
            history.add(
                at,
                Kind.DONE,
                epoch=event.epoch,
                offset=event.offset,
                text=event.text,
                code=str(event.finish_reason),
                error=event.error.code if event.error is not None else "",
            )
        case ErrorEvent():
            history.add(at, Kind.ERROR, code=event.code)
        case _:
            pass


async def run_load(  # noqa: PLR0917
    urls: list[str],
    auth_secret: str,
    scenario: str,
    config: LoadConfig,
    clock: Clock,
    histories: list[TurnHistory],
    stop: asyncio.Event,
) -> list[asyncio.Task[None]]:
    """Start the users (staggered over one pacing interval, spread over the edges)."""
    interval = config.users / config.turns_per_s
    users = [
        User(f"{scenario}-u{i}", urls, auth_secret, scenario, config, clock, histories, i)
        for i in range(config.users)
    ]
    return [
        asyncio.create_task(user.run(stop, interval * i / config.users), name=user.name)
        for i, user in enumerate(users)
    ]

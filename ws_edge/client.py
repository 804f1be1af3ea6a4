"""A small client of the edge protocol (used by the terminal chat, the tests, the benchmark).

Events are demultiplexed by turn id, so one connection can run several turns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator

from websockets.asyncio.client import ClientConnection, connect

from ws_edge.messages import (
    AnyServerEvent,
    Authenticate,
    CancelTurn,
    ClientMessage,
    CreateTurn,
    ErrorEvent,
    ResponseDone,
    SessionReady,
    TurnAccepted,
    encode_client,
    server_decoder,
)


class TurnRejected(RuntimeError):
    def __init__(self, error: ErrorEvent) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


class EdgeClient:
    def __init__(self, websocket: ClientConnection) -> None:
        self.websocket = websocket
        self.ready: SessionReady | None = None
        self._pending: asyncio.Queue[AnyServerEvent] = asyncio.Queue()  # not tied to a turn
        self._turns: dict[str, asyncio.Queue[AnyServerEvent]] = defaultdict(asyncio.Queue)
        # answers to turn.create, matched by client_turn_id (safe with concurrent turns)
        self._acceptances: dict[str, asyncio.Future[TurnAccepted | ErrorEvent]] = {}
        self._reader = asyncio.create_task(self._read())

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, url: str, token: str | None = None) -> AsyncIterator[EdgeClient]:
        async with connect(url, compression=None, max_size=None) as websocket:
            client = cls(websocket)
            try:
                if token is not None:
                    await client.send(Authenticate(token=token))
                    event = await client.next_event()
                    if isinstance(event, ErrorEvent):
                        raise TurnRejected(event)
                    assert isinstance(event, SessionReady), event
                    client.ready = event
                yield client
            finally:
                client._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await client._reader

    async def send(self, message: ClientMessage) -> None:
        await self.websocket.send(encode_client(message))

    async def send_raw(self, frame: str | bytes) -> None:
        await self.websocket.send(frame)

    async def next_event(self, wait_s: float = 30.0) -> AnyServerEvent:
        """The next event that is not part of an accepted turn's stream."""
        return await asyncio.wait_for(self._pending.get(), wait_s)

    async def start_turn(self, conversation_id: str, text: str, **options) -> str:
        """Send a turn and wait for `turn.accepted`; raise `TurnRejected` on an error event.

        A `client_turn_id` is generated when not given, so retrying the same call after a
        retryable error is answered once, and concurrent calls are matched correctly."""
        client_turn_id = options.pop("client_turn_id", None) or uuid.uuid4().hex[:16]
        answer: asyncio.Future[TurnAccepted | ErrorEvent] = (
            asyncio.get_running_loop().create_future()
        )
        self._acceptances[client_turn_id] = answer
        try:
            await self.send(
                CreateTurn(
                    conversation_id=conversation_id,
                    text=text,
                    client_turn_id=client_turn_id,
                    **options,
                )
            )
            # A message the edge could not even parse is answered without the id: take the
            # next unmatched error then (only malformed requests rely on order).
            unmatched = asyncio.ensure_future(self.next_event())
            done, _ = await asyncio.wait(
                {answer, unmatched}, timeout=30, return_when=asyncio.FIRST_COMPLETED
            )
            if answer in done:
                unmatched.cancel()
                event = answer.result()
            elif unmatched in done:
                event = unmatched.result()
            else:
                unmatched.cancel()
                raise TimeoutError("no answer to turn.create within 30 s")
        finally:
            self._acceptances.pop(client_turn_id, None)
        if isinstance(event, ErrorEvent):
            raise TurnRejected(event)
        assert isinstance(event, TurnAccepted), event
        return event.turn_id

    async def events(self, turn_id: str, wait_s: float = 120.0) -> AsyncIterator[AnyServerEvent]:
        """The turn's events up to and including `response.done`."""
        queue = self._turns[turn_id]
        while True:
            event = await asyncio.wait_for(queue.get(), wait_s)
            yield event
            if isinstance(event, ResponseDone):
                del self._turns[turn_id]
                return

    async def ask(self, conversation_id: str, text: str, **options) -> ResponseDone:
        turn_id = await self.start_turn(conversation_id, text, **options)
        async for event in self.events(turn_id):
            if isinstance(event, ResponseDone):
                return event
        raise AssertionError("unreachable")

    async def cancel(self, turn_id: str) -> None:
        await self.send(CancelTurn(turn_id=turn_id))

    async def _read(self) -> None:
        async for frame in self.websocket:
            event = server_decoder.decode(frame)
            waiting = self._acceptances.get(getattr(event, "client_turn_id", None) or "")
            if isinstance(event, (TurnAccepted, ErrorEvent)) and waiting is not None:
                if not waiting.done():
                    waiting.set_result(event)
                continue
            turn_id = getattr(event, "turn_id", None)
            if turn_id is not None and not isinstance(event, (TurnAccepted, ErrorEvent)):
                self._turns[turn_id].put_nowait(event)
            elif isinstance(event, ErrorEvent) and event.turn_id in self._turns:
                self._turns[event.turn_id].put_nowait(event)
            else:
                self._pending.put_nowait(event)

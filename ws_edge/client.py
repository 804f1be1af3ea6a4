"""A small client of the edge protocol (used by the terminal chat, the tests, the benchmark).

Events are demultiplexed by turn id, so one connection can run several turns at once. The
client remembers each turn's last log position (`positions`), so after a lost connection a
new client (to any edge) picks the answers up where they were with `resume`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from base64 import b64decode, b64encode
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from websockets.asyncio.client import ClientConnection, connect

from runtime.cancelling import cancel_and_wait
from schemas.events import FeedbackKind
from schemas.turn_log import START, LogPosition
from ws_edge.errors import EdgeError
from ws_edge.messages import (
    AnyServerEvent,
    AppendAudio,
    AudioPart,
    Authenticate,
    CancelTurn,
    ClientMessage,
    CreateTurn,
    ErrorEvent,
    Feedback,
    FeedbackRecorded,
    ImagePart,
    InterruptTurn,
    ResponseAudioDone,
    ResponseDone,
    ResponseImage,
    ResponseImageProgress,
    ResponseResumed,
    ResumeResponse,
    SessionReady,
    SessionUpdate,
    SessionUpdated,
    TurnAccepted,
    encode_client,
    server_decoder,
)


def _b64(data: bytes) -> str:
    return b64encode(data).decode()


def image_part(data: bytes | None = None, *, url: str | None = None) -> ImagePart:
    """An image for `start_turn(parts=[...])`: file bytes, or an https URL."""
    return ImagePart(data=None if data is None else _b64(data), url=url)


def audio_part(
    data: bytes | None = None,
    *,
    stream_id: str | None = None,
    pcm16_rate: int | None = None,
    language: str | None = None,
) -> AudioPart:
    """Audio for `start_turn(parts=[...])`: a recorded file's bytes, raw PCM16 at
    `pcm16_rate`, or the stream filled with `append_audio`; `language` (ISO 639-1) when
    known, else the ASR detects it."""
    return AudioPart(
        data=None if data is None else _b64(data),
        stream_id=stream_id,
        format="pcm16" if pcm16_rate else None,
        sample_rate=pcm16_rate,
        language=language,
    )


@dataclass
class ImageAnswer:
    """What `draw` collected of a picture turn: its progress events in order, its images
    (PNG bytes) and its `response.done`."""

    turn_id: str
    progress: list[ResponseImageProgress] = field(default_factory=list)
    images: list[ResponseImage] = field(default_factory=list)
    done: ResponseDone | None = None

    def png(self, index: int = 0) -> bytes:
        return b64decode(self.images[index].data)


class TurnRejected(EdgeError, RuntimeError):
    """The edge refused a turn; `code` is the code it sent."""

    def __init__(self, error: ErrorEvent, client_turn_id: str | None = None) -> None:
        super().__init__(f"{error.code}: {error.message}", code=error.code)
        self.retryable = error.retryable
        self.error = error
        self.client_turn_id = client_turn_id  # reuse it to retry the same turn


class EdgeClient:
    def __init__(self, websocket: ClientConnection) -> None:
        self.websocket = websocket
        self.ready: SessionReady | None = None
        self._pending: asyncio.Queue[AnyServerEvent] = asyncio.Queue()  # not tied to a turn
        self._turns: dict[str, asyncio.Queue[AnyServerEvent]] = defaultdict(asyncio.Queue)
        # answers to turn.create, matched by client_turn_id (safe with concurrent turns)
        self._acceptances: dict[str, asyncio.Future[TurnAccepted | ErrorEvent]] = {}
        self._loose_errors: asyncio.Queue[ErrorEvent] = asyncio.Queue()  # errors with no ids
        # each turn's position in its log: the last logged frame received (for `resume`)
        self.positions: dict[str, LogPosition] = {}
        self._reader = asyncio.create_task(self._read())

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls, url: str, token: str | None = None, *, headers: dict[str, str] | None = None
    ) -> AsyncIterator[EdgeClient]:
        """`headers`: extra HTTP headers of the upgrade request (e.g. a W3C `traceparent`,
        which makes the client's trace the parent of its turns' traces)."""
        async with connect(
            url, compression=None, max_size=None, additional_headers=headers
        ) as websocket:
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
                await cancel_and_wait([client._reader])

    async def send(self, message: ClientMessage) -> None:
        await self.websocket.send(encode_client(message))

    async def send_raw(self, frame: str | bytes) -> None:
        await self.websocket.send(frame)

    async def next_event(self, wait_s: float = 30.0) -> AnyServerEvent:
        """The next event that is not part of an accepted turn's stream."""
        async with asyncio.timeout(wait_s):
            return await self._pending.get()

    async def start_turn(self, conversation_id: str, text: str, **options) -> str:
        """Send a turn and wait for `turn.accepted`; raise `TurnRejected` on an error event.

        Answers are matched by `client_turn_id` (generated when not given), so concurrent
        calls are safe. To retry after a retryable error without risking a second answer,
        call again with `client_turn_id=rejected.client_turn_id`."""
        client_turn_id = options.pop("client_turn_id", None) or uuid.uuid4().hex[:16]
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[TurnAccepted | ErrorEvent] = loop.create_future()
        self._acceptances[client_turn_id] = answer
        while not self._loose_errors.empty():  # stale: they answered earlier messages
            self._loose_errors.get_nowait()
        try:
            await self.send(
                CreateTurn(
                    conversation_id=conversation_id,
                    text=text,
                    client_turn_id=client_turn_id,
                    **options,
                )
            )
            # A message the edge could not even parse is answered by an error without ids.
            loose = asyncio.ensure_future(self._loose_errors.get())
            try:
                done, _ = await asyncio.wait(
                    {answer, loose}, timeout=30, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                loose.cancel()
            if answer in done:
                event = answer.result()
            elif loose in done:
                event = loose.result()
            else:
                raise TimeoutError("no answer to turn.create within 30 s")
        finally:
            if self._acceptances.get(client_turn_id) is answer:
                del self._acceptances[client_turn_id]
        if isinstance(event, ErrorEvent):
            raise TurnRejected(event, client_turn_id)
        assert isinstance(event, TurnAccepted), event
        return event.turn_id

    async def events(
        self, turn_id: str, wait_s: float = 120.0, *, speech: bool = False
    ) -> AsyncIterator[AnyServerEvent]:
        """The turn's events up to and including `response.done` (with `speech`: until both
        `response.done` and `response.audio.done` came, in whichever order)."""
        queue = self._turns[turn_id]
        ends: set[type] = {ResponseDone, ResponseAudioDone} if speech else {ResponseDone}
        while True:
            async with asyncio.timeout(wait_s):
                event = await queue.get()
            yield event
            ends.discard(type(event))
            if not ends:
                del self._turns[turn_id]
                return

    async def update_session(self, **settings) -> SessionUpdated:
        """Change the session's settings (`speech`, `turn_detection`); the edge's answer."""
        await self.send(SessionUpdate(**settings))
        while True:
            event = await self.next_event()
            if isinstance(event, SessionUpdated):
                return event
            if isinstance(event, ErrorEvent):
                raise TurnRejected(event)

    async def interrupt(self, turn_id: str, audio_end_ms: float | None = None) -> None:
        await self.send(InterruptTurn(turn_id=turn_id, audio_end_ms=audio_end_ms))

    async def ask(self, conversation_id: str, text: str, **options) -> ResponseDone:
        turn_id = await self.start_turn(conversation_id, text, **options)
        async for event in self.events(turn_id):
            if isinstance(event, ResponseDone):
                return event
        raise AssertionError("unreachable")

    async def ask_through_tools(
        self, conversation_id: str, text: str, **options
    ) -> list[ResponseDone]:
        """The answer and each turn it continued in, while the deployment's tools ran its
        calls (`response.done.continued_by`): the last one is the answer's end."""
        answers = [await self.ask(conversation_id, text, **options)]
        while answers[-1].continued_by:
            async for event in self.events(answers[-1].continued_by):
                if isinstance(event, ResponseDone):
                    answers.append(event)
        return answers

    async def draw(self, conversation_id: str, text: str, **options) -> ImageAnswer:
        """Ask for a picture ("draw a cat"; `image=ImageOptions(width=…, steps=…)`) and
        collect its progress, the image and the end."""
        answer = ImageAnswer(await self.start_turn(conversation_id, text, **options))
        async for event in self.events(answer.turn_id):
            if isinstance(event, ResponseImageProgress):
                answer.progress.append(event)
            elif isinstance(event, ResponseImage):
                answer.images.append(event)
            elif isinstance(event, ResponseDone):
                answer.done = event
        return answer

    async def append_audio(self, stream_id: str, pcm: bytes, chunk_bytes: int = 6400) -> None:
        """Send microphone audio in pieces (default 200 ms of 16 kHz PCM16 each)."""
        for start in range(0, len(pcm), chunk_bytes):
            await self.send(AppendAudio(stream_id, _b64(pcm[start : start + chunk_bytes])))

    async def give_feedback(
        self, turn_id: str, kind: FeedbackKind, comment: str = ""
    ) -> FeedbackRecorded:
        """Feedback on a finished turn; raises `TurnRejected` when the edge refuses it."""
        queue = self._turns[turn_id]  # the confirmation or the error for this turn lands here
        try:
            await self.send(Feedback(turn_id=turn_id, kind=kind, comment=comment))
            async with asyncio.timeout(30):
                event = await queue.get()
        finally:
            self._turns.pop(turn_id, None)
        if isinstance(event, ErrorEvent):
            raise TurnRejected(event)
        assert isinstance(event, FeedbackRecorded), event
        return event

    async def resume(
        self,
        turn_id: str | None = None,
        *,
        conversation_id: str | None = None,
        after: LogPosition | None = None,
    ) -> ResponseResumed:
        """Follow a turn again (after a reconnect, or from another device): its frames after
        `after` (default: from the start) then arrive through `events(turn_id)`. Name the
        turn, or the conversation to join its latest turn. Raises `TurnRejected` when the
        edge refuses (not the user's turn, unknown, too many open)."""
        position = after or START
        await self.send(
            ResumeResponse(
                turn_id=turn_id,
                conversation_id=conversation_id,
                epoch=position.epoch,
                offset=position.offset,
            )
        )
        while True:
            event = await self.next_event()
            if isinstance(event, ResponseResumed) and (
                event.turn_id == turn_id
                or (turn_id is None and event.conversation_id == conversation_id)
            ):
                return event
            if isinstance(event, ErrorEvent) and event.turn_id in (turn_id, None):
                raise TurnRejected(event)

    async def cancel(self, turn_id: str) -> None:
        await self.send(CancelTurn(turn_id=turn_id))

    async def _read(self) -> None:
        async for frame in self.websocket:
            event = server_decoder.decode(frame)
            epoch, offset = getattr(event, "epoch", None), getattr(event, "offset", None)
            if epoch is not None and offset is not None:
                self.positions[event.turn_id] = LogPosition(epoch, offset)  # type: ignore[union-attr]
            if isinstance(event, ResponseResumed):
                self._pending.put_nowait(event)  # `resume` waits for it; frames follow
                continue
            client_turn_id = getattr(event, "client_turn_id", None)
            if isinstance(event, (TurnAccepted, ErrorEvent)) and client_turn_id:
                waiting = self._acceptances.get(client_turn_id)
                if waiting is not None and not waiting.done():
                    waiting.set_result(event)
                continue  # an answer to a start_turn that gave up: nobody to tell
            if isinstance(event, ErrorEvent) and event.turn_id is None:
                self._loose_errors.put_nowait(event)
            turn_id = getattr(event, "turn_id", None)
            if turn_id is not None and not isinstance(event, (TurnAccepted, ErrorEvent)):
                self._turns[turn_id].put_nowait(event)
            elif isinstance(event, ErrorEvent) and event.turn_id in self._turns:
                self._turns[event.turn_id].put_nowait(event)
            else:
                self._pending.put_nowait(event)

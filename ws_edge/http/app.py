"""The edge's HTTP door: an OpenAI-compatible API over the same pipeline as the WebSocket.

- `POST /v1/chat/completions`: a turn (`stream: true` as Server-Sent Events, else one JSON
  answer). Each request is a `TurnDoor` driving its own `Session` with the `turn.create`
  the request reads as (`chat_request`), so admission, tiers and buckets, the conversation
  claim, media limits, the Kafka path, screening, routing, safety, traces and metrics are
  the WebSocket turn's, not a copy of them.
- `GET /v1/chat/completions/{id}/events`: the answer's stream again, after the event named
  by `Last-Event-ID` (or `?after=`), on any edge node: `response.resume` underneath, so no
  gap and no duplicate. Disconnecting never stops generation.
- `POST /v1/chat/completions/{id}/cancel`: stops it.
- `GET /v1/models`: what the router can pick.

Authentication: `Authorization: Bearer <the same signed token as the WebSocket's>`. Errors
are OpenAI's JSON error shape with the status of the protocol's code (`statuses`).
Slow readers: the stream's frames queue in the same bounded `Outbox` as a WebSocket's, and
content chunks that wait there are joined (fewer, bigger chunks for a reader behind); a
reader past its bound is cut off: its stream ends after what was written, and a connection
that takes nothing is dropped after TURNSTREAM_SLOW_CLOSE_S (the turn goes on, and the stream
can be resumed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from runtime import prometheus as prom
from schemas.events import FinishReason
from ws_edge.actions import RequestCancel
from ws_edge.auth import Principal, is_api_key, verify_token
from ws_edge.door import TurnDoor
from ws_edge.errors import AuthError, EdgeError, InvalidMessage, UnknownTurn, UnsupportedParameter
from ws_edge.http.chat_request import (
    CONVERSATION_HEADER,
    IDEMPOTENCY_HEADER,
    ChatTurn,
    parse_chat_request,
    resume_message,
)
from ws_edge.http.chat_stream import (
    DONE_FRAME,
    HEARTBEAT_FRAME,
    RETRY_FRAME,
    ChatStream,
    error_object,
    turn_of,
)
from ws_edge.http.shapes import CancelResult, Model, ModelList
from ws_edge.http.statuses import error_kind, http_status, retry_headers
from ws_edge.messages import (
    ErrorEvent,
    ResponseDelta,
    ResponseDone,
    ResponseResumed,
    ServerEvent,
    TurnAccepted,
    encode_client,
)
from ws_edge.outbox import Outbox, OutboxOverflow

if TYPE_CHECKING:
    from ws_edge.server import EdgeServer

log = logging.getLogger("turnstream.edge.http")

COMPLETIONS = "/v1/chat/completions"
EDGE_KEY: web.AppKey[EdgeServer] = web.AppKey("edge")
_encoder = msgspec.json.Encoder()


def build_app(edge: EdgeServer) -> web.Application:
    app = web.Application(client_max_size=edge.settings.max_frame_bytes)
    app[EDGE_KEY] = edge
    app.router.add_post(COMPLETIONS, _completions)
    app.router.add_get(COMPLETIONS + "/{id}/events", _resume)
    app.router.add_post(COMPLETIONS + "/{id}/cancel", _cancel)
    app.router.add_get("/v1/models", _models)
    return app


def error_response(err: EdgeError, *, retry_after_ms: int | None = None) -> web.Response:
    status = http_status(err.code, err.retryable)
    param = err.param if isinstance(err, UnsupportedParameter) else None
    body = error_object(err.code, err.message, kind=error_kind(status), param=param)
    retry_after = (
        retry_after_ms if retry_after_ms is not None else getattr(err, "retry_after_ms", None)
    )
    return json_response(body, status=status, headers=retry_headers(err.retryable, retry_after))


def json_response(
    body: msgspec.Struct, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=_encoder.encode(body), status=status, headers=headers, content_type="application/json"
    )


def _refusal(event: ErrorEvent) -> web.Response:
    err = EdgeError(event.message, code=event.code)
    err.retryable = event.retryable
    return error_response(err, retry_after_ms=event.retry_after_ms)


def _bearer(request: web.Request, *, in_url: bool = False) -> str:
    """The request's token: `Authorization: Bearer`, or (`in_url`: for EventSource, which
    cannot send headers) a `token` URL parameter, as the WebSocket door takes it."""
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer ") and auth[7:].strip():
        return auth[7:].strip()
    if in_url and request.query.get("token"):
        return request.query["token"]
    raise AuthError("send Authorization: Bearer <token>", code="unauthenticated")


def _counted(route: str, response: web.StreamResponse) -> web.StreamResponse:
    prom.EDGE_HTTP_REQUESTS.labels(route, str(response.status)).inc()
    return response


async def _completions(request: web.Request) -> web.StreamResponse:
    edge = request.app[EDGE_KEY]
    try:
        token = _bearer(request)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise EdgeError(
                f"the request is too large: {exc.text}", code="message_too_large"
            ) from None
        chat = parse_chat_request(
            body,
            conversation_id=request.headers.get(CONVERSATION_HEADER),
            idempotency_key=request.headers.get(IDEMPOTENCY_HEADER),
        )
    except EdgeError as err:
        return _counted("completions", error_response(err))
    door = HttpDoor(
        edge, request, stream=chat.stream, include_usage=chat.include_usage, model=chat.model
    )
    return _counted("completions", await door.answer(token, chat))


async def _resume(request: web.Request) -> web.StreamResponse:
    edge = request.app[EDGE_KEY]
    try:
        token = _bearer(request, in_url=True)
        turn_id = turn_of(request.match_info["id"])
        if turn_id is None:
            raise UnknownTurn(f"no completion {request.match_info['id']!r}")
        after = request.headers.get("Last-Event-ID") or request.query.get("after")
        message = resume_message(turn_id, after)
    except EdgeError as err:
        return _counted("resume", error_response(err))
    door = HttpDoor(
        edge,
        request,
        stream=True,
        include_usage=False,
        model="",
        resumable=True,
    )
    return _counted("resume", await door.follow(token, turn_id, encode_client(message)))


async def _cancel(request: web.Request) -> web.StreamResponse:
    edge = request.app[EDGE_KEY]
    try:
        token = _bearer(request)
        turn_id = turn_of(request.match_info["id"])
        if turn_id is None:
            raise UnknownTurn(f"no completion {request.match_info['id']!r}")
        door = HttpDoor(edge, request, stream=False, include_usage=False, model="")
        await door.cancel_owned(token, turn_id)
    except EdgeError as err:
        return _counted("cancel", error_response(err))
    body = CancelResult(request.match_info["id"], "chat.completion.cancel", cancelled=True)
    return _counted("cancel", json_response(body))


async def _models(request: web.Request) -> web.StreamResponse:
    edge = request.app[EDGE_KEY]
    try:
        await principal_of(edge, _bearer(request))
    except EdgeError as err:
        return _counted("models", error_response(err))
    pools = list(edge.settings.pool_names)
    auto = Model("auto", "model", 0, "turnstream", {"router": True, "pools": pools})
    listed = [auto, *(Model(pool, "model", 0, "turnstream", {"pool": pool}) for pool in pools)]
    return _counted("models", json_response(ModelList("list", listed)))


async def principal_of(edge: EdgeServer, token: str) -> Principal:
    """Whose request it is: a signed token's principal, or an API key's."""
    if is_api_key(token):
        return await edge.api_keys.resolve(token)
    return verify_token(edge.settings.auth_secret, token)


class HttpDoor(TurnDoor):
    """One HTTP request's turn: the session's events become an SSE stream or one answer."""

    def __init__(
        self,
        edge: EdgeServer,
        request: web.Request,
        *,
        stream: bool,
        include_usage: bool,
        model: str,
        resumable: bool = False,
    ) -> None:
        super().__init__(edge, request.headers)
        # a GET .../events stream (EventSource): told how soon to reconnect, and ended after
        # TURNSTREAM_SSE_MAX_STREAM_S; a POST's stream (an SDK's) runs to its end
        self._resumable = resumable
        self.request = request
        self.stream = stream
        self.chat: ChatStream | None = None
        self._include_usage = include_usage
        self._model = model
        # the first event that says how the request is answered: accepted / resumed, or an
        # error before either
        self._opened: asyncio.Future[ServerEvent] = asyncio.get_running_loop().create_future()
        self._finished = asyncio.Event()
        self._cut_off = False
        self._stream_ended = False  # past it the connection may serve another request
        self._drop_timer: asyncio.TimerHandle | None = None

    # ---- the three requests ------------------------------------------------------------------
    async def answer(self, token: str, chat: ChatTurn) -> web.StreamResponse:
        try:
            return await self._run(token, encode_client(chat.create))
        finally:
            await self._teardown()

    async def follow(self, token: str, turn_id: str, resume: str) -> web.StreamResponse:
        self._open_stream(turn_id)
        try:
            return await self._run(token, resume)
        finally:
            await self._teardown()

    async def cancel_owned(self, token: str, turn_id: str) -> None:
        """Cancel a turn of the token's user (any request, any edge node may)."""
        principal = await principal_of(self.edge, token)
        owner, conversation_id = await self.owner_of(turn_id)
        if owner != principal.owner:  # the same answer whether it exists or not
            raise UnknownTurn(f"no turn {turn_id!r} of yours to cancel")
        await self._cancel(RequestCancel(turn_id, conversation_id))

    # ---- the session's events ----------------------------------------------------------------
    def _deliver(self, event: ServerEvent) -> None:
        if not self._opened.done():
            if isinstance(event, TurnAccepted):
                self._open_stream(event.turn_id)
            elif isinstance(event, ErrorEvent | ResponseResumed):
                pass
            else:
                return  # session.ready: the request's own authentication
            self._opened.set_result(event)
            if isinstance(event, ErrorEvent):
                self._finished.set()
                return
        if self.chat is None:
            return
        try:
            if isinstance(event, ResponseDelta) and self.stream:
                self.chat.record(event)  # joined with the one queued before it, if any
                self.outbox.put_delta(event, render=self.chat.delta_frame)
                return
            frames = self.chat.frames(event)
            if isinstance(event, ResponseDone) or (
                isinstance(event, ErrorEvent) and DONE_FRAME not in frames
            ):
                self._finished.set()
                if isinstance(event, ErrorEvent):
                    frames.append(DONE_FRAME)
            if self.stream:
                for frame in frames:
                    self.outbox.put(frame)
        except OutboxOverflow as err:
            self._cut(err)

    def _cut(self, err: OutboxOverflow) -> None:
        """A reader that fell past the outbox's bound: no more frames for it; the stream ends
        after what is queued (no `[DONE]`: the answer goes on, and can be resumed). A writer
        stuck behind a reader that stopped altogether cannot end it, so after
        TURNSTREAM_SLOW_CLOSE_S the connection is dropped."""
        log.warning("cutting off a slow event stream: %s", err)
        self.edge.slow_clients_closed += 1
        prom.EDGE_SLOW_CLOSED.inc()
        self.outbox.closed = True
        self._cut_off = True
        self._finished.set()
        loop = asyncio.get_running_loop()
        self._drop_timer = loop.call_later(self.edge.settings.slow_close_s, self._drop)

    def _drop(self) -> None:
        transport = self.request.transport
        if not self._stream_ended and transport is not None:
            transport.abort()  # the stuck write raises; the request's handler ends

    async def _close(self, code: int, reason: str) -> None:
        self._finished.set()

    # ---- internals ---------------------------------------------------------------------------
    def _open_stream(self, turn_id: str) -> None:
        if self.chat is None:
            resume = f"{COMPLETIONS}/chatcmpl-{turn_id}/events"
            self.chat = ChatStream(
                turn_id, self._model, int(time.time()), resume, self._include_usage
            )

    async def _run(self, token: str, message: str) -> web.StreamResponse:
        await self.authenticate(token)
        if self.session.authenticated:
            self._apply(self.session.receive(message))
        opened = await self._opened
        if isinstance(opened, ErrorEvent):
            return _refusal(opened)
        if not self.stream:
            await self._finished.wait()
            return self._whole_answer()
        return await self._stream()

    def _whole_answer(self) -> web.Response:
        assert self.chat is not None
        done = self.chat.done
        if done is None:
            error = self.chat.error
            if error is None:
                raise RuntimeError("a finished answer without response.done or an error")
            return _refusal(error)
        if done.error is not None and done.finish_reason == FinishReason.ERROR:
            err = EdgeError(done.error.message, code=done.error.code)
            err.retryable = done.error.retryable
            return error_response(err)
        if done.error is not None and done.error.code in ("input_blocked", "image_blocked"):
            return error_response(InvalidMessage(done.error.message, code=done.error.code))
        return json_response(self.chat.completion())

    async def _stream(self) -> web.StreamResponse:
        assert self.chat is not None
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: pass events on as they come
                "X-Turnstream-Resume-Url": self.chat.resume_url,
            }
        )
        await response.prepare(self.request)
        heartbeat = self.edge.settings.sse_heartbeat_s
        loop = asyncio.get_running_loop()
        max_s = self.edge.settings.sse_max_stream_s if self._resumable else 0.0
        ends_at = loop.time() + max_s if max_s > 0 else float("inf")
        try:
            if self._resumable:  # EventSource reads it; an SDK's decoder would choke on it
                await response.write(RETRY_FRAME.encode())
            while True:
                left = ends_at - loop.time()
                if left <= 0:
                    break  # the client comes back with Last-Event-ID (EventSource does)
                frames = await _take(self.outbox, min(heartbeat, left))
                if not frames:
                    if loop.time() < ends_at:
                        await response.write(HEARTBEAT_FRAME.encode())
                    continue
                await response.write("".join(frames).encode())
                prom.EDGE_FRAMES.inc(len(frames))
                if frames[-1] == DONE_FRAME or (self._cut_off and not len(self.outbox)):
                    break
            with contextlib.suppress(ConnectionResetError):
                await response.write_eof()
        except ConnectionResetError:
            pass  # the client went (or was dropped); the answer goes on (resumable)
        finally:
            self._stream_ended = True
            if self._drop_timer is not None:
                self._drop_timer.cancel()
        return response


async def _take(outbox: Outbox, timeout_s: float) -> list[str]:
    """What the outbox holds, waiting at most `timeout_s` (nothing: time for a heartbeat).
    Frames already queued are taken at once: no timer, no task (this runs per token)."""
    if len(outbox):
        return await outbox.take_all()
    try:
        async with asyncio.timeout(timeout_s):
            return await outbox.take_all()
    except TimeoutError:
        return []

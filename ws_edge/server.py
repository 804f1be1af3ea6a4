"""The edge process: the WebSocket door, the HTTP door (`ws_edge.http`), Kafka publishing,
the Redis relay.

Each connection gets a `Session` (pure protocol, driven by `ws_edge.door.TurnDoor`), an
`Outbox` and a writer task. Reading never waits on Kafka: a turn's claim-and-publish runs in
its own task, so a slow broker delays only that turn's `turn.accepted`, never the connection
or other users. Disconnecting does not cancel a turn: generation finishes and is recorded;
`turn.cancel` stops it. A client that comes back (here or on another edge) resumes it: the
door checks the turn is the user's, joins its watchers, and reads its log
(`schemas.turn_log`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from urllib.parse import parse_qs, urlsplit

import msgspec
from aiohttp import web
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from producers.turn_publisher import TurnPublisher
from runtime import prometheus as prom
from runtime.blobs import blob_store
from runtime.cancelling import cancel_and_wait
from runtime.exposure import require_safe_exposure
from runtime.instance_id import make_instance_id
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.ids import now_ms
from schemas.tools import AllowList
from schemas.topics import FEEDBACK, TURNS_COMPLETED, TURNS_SUBMITTED
from ws_edge.abandonment import Abandonment
from ws_edge.admission.admit import AdmissionControl
from ws_edge.admission.pool_load import PoolLoad
from ws_edge.admission.rate_limit import RateLimiter
from ws_edge.admission.tiers import TenantRegistry
from ws_edge.api_keys import ApiKeys
from ws_edge.canary import CanaryWatch
from ws_edge.conversations import ConversationClaims
from ws_edge.door import TurnDoor
from ws_edge.http.app import build_app
from ws_edge.listen import listening_socket
from ws_edge.media import MediaLimits
from ws_edge.messages import (
    ResponseAudio,
    ResponseDelta,
    ServerEvent,
    encode_server,
)
from ws_edge.outbox import OutboxOverflow
from ws_edge.relay import RelaySubscriber
from ws_edge.server_tools import ServerTools, follow_catalog
from ws_edge.session import SessionLimits
from ws_edge.unattended import UnattendedTurns
from ws_edge.voice.command_spotter import CommandJudge
from ws_edge.voice.interim import InterimTranscriber
from ws_edge.voice.loop import VadRules
from ws_edge.voice.turn_model import TurnJudge
from ws_edge.web_assets import process_request

log = logging.getLogger("turnstream.edge")

CANCEL_MARKER_TTL_S = 3600
CLOSE_TRY_AGAIN_LATER = 1013
_owner_record = msgspec.json.Decoder(tuple[str, str])  # (owner, conversation_id)


class EdgeServer:
    def __init__(self, settings: Settings, *, edge_id: str | None = None) -> None:
        self.settings = settings
        self.edge_id = edge_id or make_instance_id("edge", settings.edge_id)
        self.names = RedisNames.for_namespace(settings.namespace)
        self.redis = redis_client(settings.redis_url)
        self.publisher = TurnPublisher(
            settings.kafka_bootstrap,
            TURNS_SUBMITTED.full_name(settings.namespace),
            client_id=self.edge_id,
            timeout_s=settings.publish_timeout_s,
            idempotent=settings.kafka_idempotent,
            metadata_max_age_s=settings.kafka_metadata_max_age_s,
        )
        self.relay = RelaySubscriber(
            self.redis,
            self.names.edge_channel(self.edge_id),
            self.names.done_key,
            self.names.turn_log_key,
        )
        self.claims = ConversationClaims(self.redis, self.names, settings.history_ttl_s)
        self.limits = SessionLimits(
            max_message_bytes=settings.max_message_bytes,
            max_open_turns=settings.max_turns_in_flight_per_session,
            default_frequency_penalty=settings.default_frequency_penalty,
            max_history_chars=settings.history_max_chars,
            max_schema_bytes=settings.max_schema_bytes,
            media=MediaLimits(
                max_media_bytes=settings.max_media_bytes,
                max_images=settings.max_images_per_turn,
                max_audio_buffer_bytes=settings.max_audio_buffer_bytes,
                max_text_chars=settings.max_turn_chars,
            ),
            max_media_message_bytes=settings.max_frame_bytes,
            voices=settings.voice_names,
            vad=VadRules(
                threshold=settings.vad_threshold,
                silence_ms=settings.vad_silence_ms,
                min_speech_ms=settings.vad_min_speech_ms,
                barge_in_ms=settings.barge_in_min_speech_ms,
                early_silence_ms=settings.vad_early_silence_ms,
                command_check_ms=settings.command_check_ms,
                barge_in_grace_ms=settings.barge_in_grace_ms,
                interim_ms=settings.interim_ms,
            ),
        )
        self.completed_topic = TURNS_COMPLETED.full_name(settings.namespace)
        self.feedback_topic = FEEDBACK.full_name(settings.namespace)
        self.blobs = blob_store(settings.blob_store_url, self.redis, self.names)
        self.admission = AdmissionControl(
            tenants=TenantRegistry.load(settings.tenant_registry_path),
            limiter=RateLimiter(
                self.redis, self.names.prefix, timeout_s=settings.rate_limit_timeout_s
            ),
            load=PoolLoad(
                self.redis,
                self.names,
                settings.pool_names,
                ttl_ms=settings.worker_state_ttl_ms,
                clock_ms=now_ms,
            ),
            fail_open=settings.rate_limit_fail_open,
            retry_after_ms=settings.overload_retry_after_ms,
            charge_linger_s=settings.charge_linger_ms / 1000,
        )
        self.unattended = UnattendedTurns(self.relay, self.admission)
        self.abandonment = Abandonment(
            redis=self.redis,
            names=self.names,
            publisher=self.publisher,
            feedback_topic=self.feedback_topic,
            window_s=settings.abandon_window_s,
            clock_ms=now_ms,
        )
        self.turn_judge = TurnJudge(
            threads=settings.turn_model_threads, max_waiting=settings.turn_model_max_waiting
        )
        self.command_judge = CommandJudge(
            settings.state_path / "models", max_waiting=settings.command_spotter_max_waiting
        )
        self.command_spotter_failed = False  # logged once per process; checks then fall back
        self.interim_transcriber = InterimTranscriber(
            settings.state_path / "models",
            settings.asr_model,
            max_waiting=settings.interim_max_waiting,
        )
        self.canary = CanaryWatch(self.redis, self.names, now_ms)
        self.api_keys = ApiKeys(self.redis, self.names)
        self._server: Server | None = None
        self.slow_clients_closed = 0  # connections closed for falling too far behind
        self._relay_task: asyncio.Task[None] | None = None
        self.server_tools = ServerTools(AllowList.parse(settings.tool_allow))
        self._catalog_task: asyncio.Task[None] | None = None
        self._http: web.AppRunner | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        require_safe_exposure(self.settings, edge=True)  # before anything listens
        await self.publisher.start()
        self.admission.charges.start()
        self._relay_task = asyncio.create_task(self.relay.run(), name="edge-relay")
        async with asyncio.timeout(10):
            await self.relay.subscribed.wait()
        self.abandonment.start()
        if self.server_tools.allow.rules:  # no tenant may call one: the catalog is not read
            catalog = follow_catalog(
                self.server_tools,
                self.redis,
                self.names,
                every_s=self.settings.tool_catalog_every_s,
            )
            self._catalog_task = asyncio.create_task(catalog, name="edge-tool-catalog")
        capped = self.settings.edge_send_buffer_bytes > 0
        where: dict[str, object] = (
            {"sock": self._socket(self.settings.edge_port)}
            if capped
            else {"host": self.settings.edge_host, "port": self.settings.edge_port}
        )
        self._server = await serve(
            self._handle,
            **where,  # type: ignore[arg-type]
            max_size=self.settings.max_frame_bytes,
            compression=None,  # small JSON frames: deflate costs more than it saves
            ping_interval=20,
            ping_timeout=20,
            close_timeout=self.settings.slow_close_s,
            process_request=process_request,  # the web client's page and scripts
        )
        log.info("edge %s listening on %s:%d", self.edge_id, self.settings.edge_host, self.port)
        if self.settings.edge_http_port >= 0:
            self._http = web.AppRunner(build_app(self), access_log=None)
            await self._http.setup()
            site: web.BaseSite = (
                web.SockSite(self._http, self._socket(self.settings.edge_http_port))
                if capped
                else web.TCPSite(self._http, self.settings.edge_host, self.settings.edge_http_port)
            )
            await site.start()
            log.info("edge %s HTTP door on port %d", self.edge_id, self.http_port)

    def _socket(self, port: int) -> socket.socket:
        return listening_socket(self.settings.edge_host, port, self.settings.edge_send_buffer_bytes)

    @property
    def http_port(self) -> int:
        """The HTTP door's port (the OpenAI-compatible API)."""
        assert self._http is not None
        return self._http.addresses[0][1]

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.cleanup()
        await self.abandonment.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._relay_task is not None:
            await cancel_and_wait([self._relay_task])
        if self._catalog_task is not None:
            await cancel_and_wait([self._catalog_task])
        await self.publisher.stop()
        await self.admission.charges.close()  # after the doors: their last ends are in it
        await self.redis.aclose()
        self.turn_judge.close()
        self.command_judge.close()
        self.interim_transcriber.close()

    async def _handle(self, websocket: ServerConnection) -> None:
        await _Connection(self, websocket).run()


def _token_from_request(websocket: ServerConnection) -> str | None:
    request = websocket.request
    if request is None:
        return None
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    tokens = parse_qs(urlsplit(request.path).query).get("token")
    return tokens[0] if tokens else None


class _Connection(TurnDoor):
    """A WebSocket client: frames in, the session's events out through a bounded outbox."""

    def __init__(self, edge: EdgeServer, websocket: ServerConnection) -> None:
        request = websocket.request
        super().__init__(edge, request.headers if request is not None else None)
        self.websocket = websocket

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        prom.EDGE_CONNECTIONS.inc()
        try:
            self._apply(self.session.open(_token_from_request(self.websocket)))
            async for frame in self.websocket:
                self._apply(self.session.receive(frame))
        except ConnectionClosed:
            pass
        finally:
            prom.EDGE_CONNECTIONS.dec()
            self.outbox.closed = True
            writer.cancel()
            await self._teardown()
            await cancel_and_wait([writer])

    def _deliver(self, event: ServerEvent) -> None:
        try:
            if isinstance(event, ResponseDelta):
                self.outbox.put_delta(event)
            else:
                tag = event.turn_id if isinstance(event, ResponseAudio) else None
                self.outbox.put(encode_server(event), tag=tag)
        except OutboxOverflow as err:
            log.warning("closing slow client: %s", err)
            self.edge.slow_clients_closed += 1
            prom.EDGE_SLOW_CLOSED.inc()
            self.outbox.closed = True  # later frames are dropped, close once
            self._spawn(self.websocket.close(CLOSE_TRY_AGAIN_LATER, "slow consumer"))

    async def _close(self, code: int, reason: str) -> None:
        await self.websocket.close(code, reason)

    async def _write(self) -> None:
        while True:
            frames = await self.outbox.take_all()
            prom.EDGE_FRAMES.inc(len(frames))
            try:
                for frame in frames:
                    await self.websocket.send(frame)
            except ConnectionClosed:
                return

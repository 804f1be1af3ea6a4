"""The benchmark's child processes: the clients, the pump (a stand-in inference worker writing to
Redis) and the subscriber."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
import traceback
import uuid
from array import array
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import msgspec

from bench.connections.common import TENANT
from bench.connections.stats import Continuity, Recorder, Window, token_text
from bench.connections.system import raise_nofile


def _child_main(role: str, conn: Connection, config: dict[str, Any]) -> None:
    """A child process: raise the fd limit, then carry out the parent's commands."""
    import uvloop

    raise_nofile()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    logging.basicConfig(level=logging.WARNING, format=f"{role}: %(levelname)s %(message)s")
    from bench.connections.sse_roles import SseClientsRole  # it builds on ClientsRole

    roles = {
        "clients": ClientsRole,
        "sse-clients": SseClientsRole,
        "pump": PumpRole,
        "subscriber": SubscriberRole,
    }
    uvloop.run(_serve(roles[role](config, conn), conn))


def settle_heap() -> None:
    """Move what this load process holds for the whole run out of the collector's way
    (`gc.freeze`): a full collection over thousands of connections' objects stalls the
    process for up to a second on this machine, and the load generators are not what is
    measured (the edge is left as it is)."""
    gc.collect()
    gc.freeze()


async def _serve(role: Any, conn: Connection) -> None:
    while True:
        command, args = await asyncio.to_thread(conn.recv)
        try:
            result = await getattr(role, command)(*args)
        except Exception:
            conn.send(("error", traceback.format_exc()))
            continue
        conn.send(("result", result))
        if command == "exit":
            return


class _DecodedFrame(msgspec.Struct):
    """The fields of a server frame the load clients look at (the rest is skipped)."""

    type: str
    turn_id: str | None = None
    text: str | None = None
    epoch: int | None = None
    offset: int | None = None
    client_turn_id: str | None = None
    code: str | None = None
    retryable: bool = False
    retry_after_ms: int | None = None


_frame_decoder = msgspec.json.Decoder(_DecodedFrame)


@dataclass(eq=False)
class _Stream:
    """One client connection and its one turn."""

    user: str
    conversation_id: str
    client_turn_id: str
    token: str
    tracked: bool  # keeps its text (a resume candidate: its whole text is compared)
    ws: Any = None
    reader: asyncio.Task[None] | None = None
    ready: asyncio.Future[None] | None = None
    accepted: asyncio.Future[str] | None = None
    create_sent: float = 0.0  # the first try
    accept_ms: float | None = None  # first try → turn.accepted (retries included)
    create_attempts: int = 0
    turn_id: str = ""
    check: Continuity = field(default_factory=Continuity)
    chars: int = 0
    parts: list[str] = field(default_factory=list)
    position: tuple[int, int] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    done_chars: int = -1
    text_matches: bool | None = None  # tracked: the received text is `response.done`'s
    resumed: bool = False
    resume_status: str = ""
    resume_ms: float | None = None  # reconnect start → first resumed delta
    # reconnect start → WebSocket open, → session.ready, → response.resumed
    resume_steps: tuple[float, float, float] | None = None
    first_resumed: asyncio.Future[None] | None = None
    error: str = ""


class ClientsRole:
    """One process's share of the load's WebSocket clients."""

    def __init__(self, config: dict[str, Any], conn: Connection) -> None:
        from ws_edge.auth import mint_token

        self.config = config
        self.conn = conn
        self.url = config["url"]
        self.recorder = Recorder()
        self.streams: list[_Stream] = []
        self.exits = contextlib.AsyncExitStack()
        self.background: set[asyncio.Task[None]] = set()  # the resumed streams' readers
        proc, run = config["proc"], config["run"]
        for i in range(config["count"]):
            user = f"u{proc}-{i}"
            self.streams.append(
                _Stream(
                    user=user,
                    conversation_id=f"c-{run}-{proc}-{i}",
                    client_turn_id=f"t-{proc}-{i}",
                    token=mint_token(config["secret"], user, TENANT),
                    tracked=i < config["tracked"],
                )
            )

    def _progress(self, value: int) -> None:
        self.conn.send(("progress", value))

    async def connect(self) -> dict[str, Any]:
        from websockets.asyncio.client import connect

        gate = asyncio.Semaphore(self.config["connect_concurrency"])
        times: list[float] = []
        failures: list[str] = []
        loop = asyncio.get_running_loop()

        async def one(stream: _Stream) -> None:
            async with gate:
                started = time.perf_counter()
                try:
                    stream.ready = loop.create_future()
                    stream.ws = await connect(
                        f"{self.url}?token={stream.token}",
                        compression=None,
                        max_size=None,
                        ping_interval=None,  # the edge pings; the clients only answer
                        open_timeout=60,
                        close_timeout=1,
                    )
                    stream.reader = asyncio.create_task(self._read(stream))
                    await asyncio.wait_for(stream.ready, 60)
                    times.append((time.perf_counter() - started) * 1000)
                except Exception as err:
                    failures.append(repr(err))
                    stream.error = f"connect: {err!r}"
                    if stream.ws is not None:
                        stream.ws.transport.abort()
                    stream.ws = None
                done = len(times) + len(failures)
                if done % 250 == 0:
                    self._progress(done)

        started = time.perf_counter()
        await asyncio.gather(*(one(s) for s in self.streams))
        self._progress(len(self.streams))
        settle_heap()
        return {
            "connect_ms": times,
            "failures": len(failures),
            "failure_kinds": dict(Counter(f.split("(")[0] for f in failures)),
            "failure_examples": failures[:3],
            "wall_s": time.perf_counter() - started,
        }

    async def create(self, rate: float, concurrency: int) -> dict[str, Any]:
        """One `turn.create` per connection: at most `concurrency` unanswered at once (the
        next goes when one is answered) and `rate` a second; retries included."""
        from ws_edge.messages import CreateTurn, encode_client

        loop = asyncio.get_running_loop()
        live = [s for s in self.streams if s.ws is not None]
        gate = asyncio.Semaphore(concurrency)
        started = time.perf_counter()
        answered = 0

        async def one(i: int, stream: _Stream) -> None:
            nonlocal answered
            async with gate:
                due = started + i / rate
                if due > time.perf_counter():
                    await asyncio.sleep(due - time.perf_counter())
                stream.accepted = loop.create_future()
                await self._send_create(stream, CreateTurn, encode_client)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stream.accepted), 90)
                answered += 1
                if answered % 250 == 0:
                    self._progress(sum(1 for s in live if s.turn_id))

        await asyncio.gather(*(one(i, s) for i, s in enumerate(live)))
        wall_s = time.perf_counter() - started
        settle_heap()
        accepted = [s for s in live if s.turn_id]
        errors = Counter(s.error.split(":")[0] for s in live if not s.turn_id)
        self._progress(len(accepted))
        return {
            "accepted": len(accepted),
            "refused": len(live) - len(accepted),
            "errors": dict(errors),
            "retries": sum(max(s.create_attempts - 1, 0) for s in live),
            "accept_ms": [s.accept_ms for s in accepted if s.accept_ms is not None],
            "wall_s": wall_s,
        }

    async def _send_create(self, stream: _Stream, create_turn: Any, encode: Any) -> None:
        stream.create_attempts += 1
        if stream.create_attempts == 1:
            stream.create_sent = time.perf_counter()
        message = create_turn(
            conversation_id=stream.conversation_id,
            text="stream me an answer",
            client_turn_id=stream.client_turn_id,  # a retry is the same turn
        )
        try:
            await stream.ws.send(encode(message))
        except Exception as err:
            stream.error = f"send: {err!r}"
            if stream.accepted is not None and not stream.accepted.done():
                stream.accepted.set_result("")

    def _refused(self, stream: _Stream, frame: _DecodedFrame) -> None:
        """An error answered the turn.create: retry what says it may be retried."""
        from ws_edge.messages import CreateTurn, encode_client

        if frame.retryable and stream.create_attempts < 6:
            wait_s = (frame.retry_after_ms or 500) / 1000
            resend = self._send_create(stream, CreateTurn, encode_client)
            asyncio.get_running_loop().call_later(wait_s, asyncio.ensure_future, resend)
            return
        stream.error = f"{frame.code}: refused"
        if stream.accepted is not None and not stream.accepted.done():
            stream.accepted.set_result("")

    async def _read(self, stream: _Stream) -> None:
        from websockets.exceptions import ConnectionClosed

        recorder = self.recorder
        try:
            async for frame in stream.ws:
                now = time.time() * 1000.0
                event = _frame_decoder.decode(frame)
                kind = event.type
                if event.epoch is not None and event.offset is not None:
                    stream.position = (event.epoch, event.offset)
                if kind == "response.delta":
                    text = event.text or ""
                    recorder.delta(now, text, stream.check)
                    stream.chars += len(text)
                    if stream.tracked:
                        stream.parts.append(text)
                elif kind == "response.done":
                    self._finished(stream, event.text or "")
                elif kind == "session.ready":
                    if stream.ready is not None and not stream.ready.done():
                        stream.ready.set_result(None)
                elif kind == "turn.accepted":
                    stream.turn_id = event.turn_id or ""
                    stream.accept_ms = (time.perf_counter() - stream.create_sent) * 1000
                    if stream.accepted is not None and not stream.accepted.done():
                        stream.accepted.set_result(stream.turn_id)
                elif kind == "error":
                    if event.client_turn_id == stream.client_turn_id and not stream.turn_id:
                        self._refused(stream, event)
                    elif not stream.error:
                        stream.error = f"{event.code}: error frame"
        except ConnectionClosed:
            pass

    def _finished(self, stream: _Stream, text: str) -> None:
        stream.done_chars = len(text)
        if stream.tracked:
            stream.text_matches = "".join(stream.parts) == text
            stream.parts = []
        stream.done.set()

    async def window(self, start_ms: float, end_ms: float) -> dict[str, Any]:
        self.recorder.window = Window(start_ms, end_ms)
        return {}

    async def report(self) -> dict[str, Any]:
        return self.recorder.report()

    async def resume(self, count: int, gap_s: float, rate: float) -> dict[str, Any]:
        """Drop `count` tracked streams' connections, reconnect, resume; until every one got
        its first resumed delta (the rest of its answer keeps coming in the background)."""
        chosen = [s for s in self.streams if s.tracked and s.turn_id and not s.done.is_set()]
        chosen = chosen[:count]
        loop = asyncio.get_running_loop()
        for stream in chosen:  # `rate` drops a second: not one synchronized herd
            stream.first_resumed = loop.create_future()
            self.background.add(asyncio.create_task(self._resume_one(stream, gap_s)))
            await asyncio.sleep(1 / rate)
        futures = [s.first_resumed for s in chosen if s.first_resumed is not None]
        if futures:
            await asyncio.wait(futures, timeout=60)
        return {
            "resume_ms": [s.resume_ms for s in chosen if s.resume_ms is not None],
            "steps_ms": [s.resume_steps for s in chosen if s.resume_steps is not None],
            "tried": len(chosen),
            "statuses": dict(Counter(s.resume_status or "none" for s in chosen)),
            "errors": [s.error for s in chosen if s.error][:5],
        }

    async def _resume_one(self, stream: _Stream, gap_s: float) -> None:
        from schemas.turn_log import LogPosition
        from ws_edge.client import EdgeClient
        from ws_edge.messages import Authenticate, ResponseDelta, ResponseDone, SessionReady

        assert stream.first_resumed is not None
        try:
            stream.ws.transport.abort()  # the network drops: no close handshake
            if stream.reader is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await stream.reader
            stream.resumed = True
            await asyncio.sleep(gap_s)
            started = time.perf_counter()
            # EdgeClient.connect(url, token), in its two steps (each timed)
            client = await self.exits.enter_async_context(EdgeClient.connect(self.url))
            opened = time.perf_counter()
            await client.send(Authenticate(token=stream.token))
            ready_event = await client.next_event()
            if not isinstance(ready_event, SessionReady):
                raise RuntimeError(f"no session.ready: {ready_event!r}")
            ready = time.perf_counter()
            after = LogPosition(*stream.position) if stream.position is not None else None
            resumed = await client.resume(stream.turn_id, after=after)
            stream.resume_steps = (
                (opened - started) * 1000,
                (ready - started) * 1000,
                (time.perf_counter() - started) * 1000,
            )
            stream.resume_status = resumed.status
            async for event in client.events(stream.turn_id, wait_s=120):
                if isinstance(event, ResponseDelta):
                    if stream.resume_ms is None:
                        stream.resume_ms = (time.perf_counter() - started) * 1000
                        stream.first_resumed.set_result(None)
                    self.recorder.delta(time.time() * 1000.0, event.text, stream.check)
                    stream.chars += len(event.text)
                    stream.parts.append(event.text)
                elif isinstance(event, ResponseDone):
                    self._finished(stream, event.text)
        except Exception as err:
            stream.error = f"resume: {err!r}"
        finally:
            if not stream.first_resumed.done():
                stream.first_resumed.set_result(None)

    async def collect(self, timeout_s: float) -> dict[str, Any]:
        """Wait for every turn's `response.done`; check what each received."""
        streams = [s for s in self.streams if s.turn_id]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while not all(s.done.is_set() for s in streams):
                    self._progress(sum(s.done.is_set() for s in streams))
                    waiting = [s for s in streams if not s.done.is_set()][:500]
                    tasks = [asyncio.ensure_future(s.done.wait()) for s in waiting]
                    await asyncio.wait(tasks, timeout=1)
                    for task in tasks:
                        task.cancel()
        done = [s for s in streams if s.done.is_set()]
        whole = [s for s in done if s.check.clean and s.chars == s.done_chars]
        resumed = [s for s in streams if s.resumed]
        return {
            "turns": len(streams),
            "done": len(done),
            "verified": len(whole),
            "gaps": sum(s.check.gaps for s in streams),
            "duplicates": sum(s.check.duplicates for s in streams),
            "length_mismatches": sum(1 for s in done if s.chars != s.done_chars),
            "resumed": len(resumed),
            "resumed_verified": sum(
                1 for s in resumed if s.text_matches and s.check.clean and s.done.is_set()
            ),
            "resumed_examples": [
                {"gaps": s.check.gaps, "duplicates": s.check.duplicates, "error": s.error}
                for s in resumed
                if not (s.text_matches and s.check.clean)
            ][:5],
        }

    async def exit(self) -> dict[str, Any]:
        for task in self.background:
            task.cancel()
        for stream in self.streams:
            if stream.ws is not None:
                stream.ws.transport.abort()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.exits.aclose(), 10)
        return {}


@dataclass(eq=False)
class _PumpStream:
    turn_id: str
    channel: str
    conversation_id: str
    tenant_id: str
    user_id: str
    attempt: str
    started_ms: float
    index: int = 0
    stamps: array = field(default_factory=lambda: array("d"))
    active: bool = True


class PumpRole:
    """The inference workers' part: every turn gets `turn.started`, a token every
    1/rate s and, on `finish`, `turn.completed`, through the workers' `RelayPublisher`."""

    def __init__(self, config: dict[str, Any], conn: Connection) -> None:
        from runtime.redis import redis_client
        from schemas.channels import RedisNames
        from workers.runtime.relay import RelayPublisher

        self.config = config
        self.names = RedisNames.for_namespace(config["namespace"])
        self.redis = redis_client(config["redis_url"], max_connections=8)
        self.publisher = RelayPublisher(self.redis, self.names)
        self.phases: list[list[_PumpStream]] = [[] for _ in range(config["phases"])]
        self.streams: list[_PumpStream] = []
        self.ticks: list[tuple[float, int]] = []  # (wall ms, tokens published)
        self.late = 0  # decode steps that came more than a token interval late
        self.refused = 0  # tokens the publisher refused (Redis too far behind)
        self.tasks: list[asyncio.Task[None]] = []
        self.consumer: Any = None
        self.seen: set[str] = set()  # a turn Kafka delivers twice is answered once
        self.duplicates = 0
        self.holding = bool(config.get("hold"))  # turns start, tokens wait for `go`

    async def start(self, synthetic: int, channel: str) -> dict[str, Any]:
        """Stream `synthetic` made-up turns to `channel`, and the turns of `turns.submitted`
        (the config's topic, if any) to their edges."""
        self.tasks.append(asyncio.create_task(self.publisher.run()))
        for i in range(synthetic):
            self._add(f"direct-{i:05d}", channel, "c", TENANT, "u")
        topic = self.config.get("topic")
        if topic:
            from aiokafka import AIOKafkaConsumer

            self.consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=self.config["kafka_bootstrap"],
                group_id=None,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=20,
            )
            await self.consumer.start()
            self.tasks.append(asyncio.create_task(self._consume()))
        self.tasks.append(asyncio.create_task(self._tick()))
        settle_heap()
        return {}

    async def _consume(self) -> None:
        from schemas.codec import decode
        from schemas.events import TurnSubmitted

        async for record in self.consumer:
            event = decode(record.value)
            if isinstance(event, TurnSubmitted):
                channel = self.names.edge_channel(event.edge_id)
                self._add(
                    event.turn_id, channel, event.conversation_id, event.tenant_id, event.user_id
                )

    def _add(self, turn_id: str, channel: str, conversation: str, tenant: str, user: str) -> None:
        from schemas.events import TurnStarted

        if turn_id in self.seen:
            self.duplicates += 1
            return
        self.seen.add(turn_id)
        stream = _PumpStream(
            turn_id, channel, conversation, tenant, user, uuid.uuid4().hex[:8], time.time() * 1000
        )
        event = TurnStarted(
            turn_id=turn_id, worker_id="bench-pump", model="bench", attempt=stream.attempt
        )
        self.publisher.publish(channel, event)
        self.phases[len(self.streams) % len(self.phases)].append(stream)
        self.streams.append(stream)

    async def _tick(self) -> None:
        """Each decode step emits one token for a phase's streams; the phases take turns,
        `phases` steps per token interval."""
        from schemas.events import TokenChunk
        from workers.runtime.relay import RelayOverflow

        interval = 1 / self.config["tokens_per_s"]
        step = interval / len(self.phases)
        next_at = time.perf_counter()
        phase = 0
        publish = self.publisher.publish
        while True:
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.holding:
                next_at = time.perf_counter() + step
                continue
            now = time.time() * 1000.0
            count = 0
            for s in self.phases[phase]:
                if not s.active:
                    continue
                chunk = TokenChunk(
                    turn_id=s.turn_id,
                    seq=s.index,
                    text=token_text(s.index, now),
                    emitted_at_ms=now,
                    attempt=s.attempt,
                )
                try:
                    publish(s.channel, chunk)
                except RelayOverflow:
                    self.refused += 1
                    continue
                s.stamps.append(now)
                s.index += 1
                count += 1
            self.ticks.append((now, count))
            phase = (phase + 1) % len(self.phases)
            next_at += step
            if time.perf_counter() - next_at > interval:  # a whole interval behind: skip it
                self.late += 1
                next_at = time.perf_counter()

    async def count(self) -> dict[str, Any]:
        return {"streams": len(self.streams), "duplicates": self.duplicates}

    async def go(self) -> dict[str, Any]:
        """Start the tokens of the turns held so far (and of every later one)."""
        settle_heap()
        self.holding = False
        return {}

    async def stats(self, start_ms: float, end_ms: float) -> dict[str, Any]:
        published = sum(c for at, c in self.ticks if start_ms <= at < end_ms)
        return {
            "tokens": published,
            "late_steps": self.late,
            "refused": self.refused,
            "duplicate_turns": self.duplicates,
            "pending": len(self.publisher._pending),
        }

    async def finish(self, turns_per_s: float) -> dict[str, Any]:
        """End every turn (`turn.completed` with the whole text), `turns_per_s` a second (a
        burst of whole answers at once is not what workers do)."""
        from schemas.events import FinishReason, Timings, TurnCompleted, Usage

        started = time.perf_counter()
        for i, s in enumerate(self.streams):
            s.active = False
            text = "".join(token_text(j, stamp) for j, stamp in enumerate(s.stamps))
            now = time.time() * 1000
            done = TurnCompleted(
                turn_id=s.turn_id,
                conversation_id=s.conversation_id,
                tenant_id=s.tenant_id,
                user_id=s.user_id,
                finish_reason=FinishReason.STOP,
                text=text,
                usage=Usage(prompt_tokens=4, completion_tokens=s.index),
                timings=Timings(queue_ms=0.0, ttft_ms=0.0, e2e_ms=now - s.started_ms),
                model="bench",
                worker_id="bench-pump",
                completed_at_ms=now,
            )
            self.publisher.publish(s.channel, done)
            due = started + (i + 1) / turns_per_s
            if due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
        await asyncio.wait_for(self.publisher.flushed(), 60)
        return {"completed": len(self.streams)}

    async def exit(self) -> dict[str, Any]:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                await self.consumer.stop()
        await self.redis.aclose()
        return {}


class SubscriberRole:
    """The direct baseline's reader: the edge's relay subscriber (one Redis subscription,
    routes by turn id, the same decoding), no sessions, no sockets."""

    def __init__(self, config: dict[str, Any], conn: Connection) -> None:
        from runtime.redis import redis_client
        from schemas.channels import RedisNames

        self.config = config
        self.names = RedisNames.for_namespace(config["namespace"])
        self.redis = redis_client(config["redis_url"], max_connections=8)
        self.recorder = Recorder()
        self.checks: dict[str, Continuity] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self, channel: str, turns: int) -> dict[str, Any]:
        from ws_edge.relay import RelaySubscriber

        relay = RelaySubscriber(self.redis, channel, self.names.done_key)
        for i in range(turns):
            turn_id = f"direct-{i:05d}"
            self.checks[turn_id] = Continuity()
            relay.route(turn_id, self._deliver)
        self.task = asyncio.create_task(relay.run())
        await asyncio.wait_for(relay.subscribed.wait(), 10)
        settle_heap()
        return {}

    def _deliver(self, event: Any, position: Any) -> None:
        from schemas.events import TokenChunk

        if isinstance(event, TokenChunk):
            self.recorder.delta(time.time() * 1000.0, event.text, self.checks[event.turn_id])

    async def window(self, start_ms: float, end_ms: float) -> dict[str, Any]:
        self.recorder.window = Window(start_ms, end_ms)
        return {}

    async def report(self) -> dict[str, Any]:
        report = self.recorder.report()
        report["gaps"] = sum(c.gaps for c in self.checks.values())
        report["duplicates"] = sum(c.duplicates for c in self.checks.values())
        return report

    async def exit(self) -> dict[str, Any]:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.redis.aclose()
        return {}

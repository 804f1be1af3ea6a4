"""A sink process serving the ClickHouse HTTP interface over a store it filled itself: a
few traces and completed turns of one tenant (the first trace a voice-loop turn, its
spoken answer's delivery recorded), sent through Kafka as the pipeline sends them.
Analysts' client tests (Python, Go, Node) query it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import urllib.request
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.request import Request

import clickhouse_connect
from aiokafka import AIOKafkaProducer

from harness.factories import completed, submitted
from harness.polling import eventually
from runtime.clickhouse.http_auth import USER, local_password
from runtime.kafka_topics import ensure_topics
from runtime.processes import Child, free_port
from runtime.settings import Settings, settings_env
from schemas.codec import encode
from schemas.events import (
    PromptContext,
    SpeechDelivered,
    SpeechSettings,
    Timings,
    TraceRecorded,
    Usage,
)
from schemas.ids import now_ms

TRACES = 3
TURNS = 4


def ms_time(stamp_ms: int) -> datetime:
    return datetime.fromtimestamp(stamp_ms / 1000, tz=UTC).replace(tzinfo=None)


def naive_utc(value: datetime) -> datetime:
    return value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)


class Sink:
    """The sink process and what was sent through it."""

    def __init__(self, settings: Settings, child: Child, tenant: str, stamp_ms: int) -> None:
        self.settings = settings
        self.child = child
        self.tenant = tenant
        self.stamp_ms = stamp_ms
        self.port = settings.clickhouse_http_port

    def open(self, target: str | urllib.request.Request):
        """urllib with the interface's credentials in ClickHouse's own headers."""
        request = target if isinstance(target, urllib.request.Request) else Request(target)
        request.add_header("X-ClickHouse-User", USER)
        request.add_header("X-ClickHouse-Key", local_password(self.settings))
        return urllib.request.urlopen(request, timeout=30)

    def client(self, compress: bool | str = False, **options):
        return clickhouse_connect.get_client(
            host="127.0.0.1",
            port=self.port,
            username=USER,
            password=local_password(self.settings),
            compress=compress,
            **options,
        )


def trace_event(tenant: str, i: int, stamp_ms: int) -> TraceRecorded:
    turn = f"{tenant}-trace-{i}"
    spoken = {"speech": SpeechSettings(), "speech_ended_at_ms": stamp_ms - 400} if i == 0 else {}
    sent = submitted(
        turn, tenant_id=tenant, user_id=f"user-{i}", submitted_at_ms=stamp_ms, **spoken
    )
    done = completed(
        turn,
        tenant_id=tenant,
        user_id=f"user-{i}",
        model=f"model-{i % 2}",
        usage=Usage(10 + i, 20 + i),
        timings=Timings(queue_ms=1, ttft_ms=5.0 + i, e2e_ms=50 + i, itl_ms=[1.5, 2.5 + i]),
        completed_at_ms=stamp_ms + 100 + i,
    )
    context = PromptContext(
        history_messages=i, dropped_messages=0, prompt_tokens=10, retrieved=[f"doc-{i}", "faq"]
    )
    return TraceRecorded(
        turn_id=turn, submitted=sent, completed=done, context=context, language="en"
    )


def delivery(tenant: str, stamp_ms: int) -> SpeechDelivered:
    """The first trace's spoken answer, as the edge records it."""
    return SpeechDelivered(
        turn_id=f"{tenant}-trace-0",
        conversation_id="c",
        tenant_id=tenant,
        user_id="user-0",
        edge_id="e",
        first_audio_at_ms=stamp_ms + 300,
        ended_at_ms=stamp_ms + 2000,
        audio_ms=1500.0,
    )


async def publish(settings: Settings, tenant: str, stamp_ms: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(TRACES):
            event = trace_event(tenant, i, stamp_ms + 1000 * i)
            await producer.send_and_wait(f"{settings.namespace}.traces", encode(event), b"k")
        for i in range(TURNS):
            turn = completed(
                f"{tenant}-turn-{i}",
                tenant_id=tenant,
                text=f"answer {i}",
                timings=Timings(queue_ms=1, ttft_ms=None if i == 0 else 3.0, e2e_ms=9, itl_ms=[]),
                completed_at_ms=stamp_ms + i,
            )
            await producer.send_and_wait(
                f"{settings.namespace}.turns.completed", encode(turn), b"k"
            )
        spoken = delivery(tenant, stamp_ms)
        await producer.send_and_wait(f"{settings.namespace}.turns.completed", encode(spoken), b"k")
    finally:
        await producer.stop()


@contextlib.asynccontextmanager
async def running_sink(home: Path) -> AsyncIterator[Sink]:
    """A sink with its own namespace and data directory under `home`, once its rows landed."""
    settings = Settings.from_env(
        namespace=f"chhttp-{uuid.uuid4().hex[:6]}",
        state_dir=str(home),
        clickhouse_http_port=free_port(),
        sink_linger_ms=50,
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    tenant = f"tenant-{uuid.uuid4().hex[:8]}"
    stamp_ms = int(now_ms()) - 60_000
    await publish(settings, tenant, stamp_ms)
    env = {**os.environ, **settings_env(settings), "PYTHONUNBUFFERED": "1"}
    (home / "logs").mkdir(parents=True, exist_ok=True)
    child = Child("sink", "workers.sink", home / "logs" / "sink.log", env)
    try:
        await asyncio.to_thread(child.wait_ready, 120)
        running = Sink(settings, child, tenant, stamp_ms)
        client = running.client()

        def landed() -> bool:
            q = "SELECT (SELECT count() FROM turnstream.traces WHERE tenant_id = %(t)s), "
            q += "(SELECT count() FROM turnstream.turns WHERE tenant_id = %(t)s), "
            q += "(SELECT count() FROM turnstream.speech_hops WHERE tenant_id = %(t)s)"
            landed = client.query(q, parameters={"t": tenant}).result_rows[0]
            return landed == (TRACES, TURNS, 1)

        await eventually(lambda: asyncio.to_thread(landed))
        yield running
    finally:
        await asyncio.to_thread(child.stop)

"""Worker metrics for real: an inference worker (fake engine) on real Kafka publishes its
state, the ClickHouse sink (embedded engine, in a process of its own) writes it into
`worker_metrics`, `infra_minutely` and the report show it; the real vLLM engine reports its
load while it generates."""

from __future__ import annotations

import asyncio
import contextlib
import json
import textwrap
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from harness.chdb import run_in_engine
from harness.factories import new_conversation_id, submitted
from harness.polling import eventually
from runtime.kafka_topics import ensure_topics
from runtime.settings import Settings
from schemas.codec import decode, encode
from schemas.events import (
    DecodingParams,
    Message,
    PromptContext,
    Role,
    TurnAssembled,
    WorkerMetrics,
)
from schemas.ids import now_ms
from schemas.topics import WORKERS_METRICS, pool_topic
from workers.inference.app import run_worker
from workers.inference.engines.engine import GenerationRequest
from workers.inference.engines.fake_engine import FakeEngine

pytestmark = pytest.mark.integration


class HeldEngine(FakeEngine):
    """The fake engine holding every answer after its first token until `release` is set:
    the test, not the clock, decides when the worker is busy."""

    def __init__(self) -> None:
        super().__init__(token_interval_s=0.001)
        self.release = asyncio.Event()

    async def stream(self, request: GenerationRequest):
        async with contextlib.aclosing(super().stream(request)) as inner:
            async for delta in inner:
                yield delta
                await self.release.wait()


def assembled(turn_id: str, conversation: str, text: str) -> TurnAssembled:
    turn = submitted(turn_id, conversation_id=conversation, text=text, submitted_at_ms=now_ms())
    return TurnAssembled(
        turn_id=turn_id,
        submitted=turn,
        messages=[Message(Role.USER, text)],
        context=PromptContext(history_messages=0, dropped_messages=0, prompt_tokens=5),
        assembled_at_ms=now_ms(),
    )


class MetricsReader:
    """Every `WorkerMetrics` on the namespace's metrics topic so far, read continuously."""

    def __init__(self, settings: Settings) -> None:
        self.topic = WORKERS_METRICS.full_name(settings.namespace)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False
        )
        self.events: list[WorkerMetrics] = []

    async def start(self) -> None:
        await self.consumer.start()
        self.partitions = [TopicPartition(self.topic, p) for p in range(WORKERS_METRICS.partitions)]
        self.consumer.assign(self.partitions)
        await self.consumer.seek_to_beginning()

    async def read(self) -> list[WorkerMetrics]:
        for records in (await self.consumer.getmany(timeout_ms=100)).values():
            for record in records:
                event = decode(record.value)
                assert isinstance(event, WorkerMetrics), event
                self.events.append(event)
        return self.events

    async def seen(self, match) -> bool:
        return any(match(e) for e in await self.read())

    async def read_to_end(self) -> list[WorkerMetrics]:
        """Everything published so far (the publisher has stopped)."""
        ends = await self.consumer.end_offsets(self.partitions)
        while [tp for tp in self.partitions if await self.consumer.position(tp) < ends[tp]]:
            await self.read()
        return self.events


SINK_AND_QUERY = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path

    from runtime.clickhouse.client import connect
    from infra.clickhouse.report import gather, plot, render
    from runtime.settings import Settings
    from workers.sink.app import run_sink

    namespace, worker, expected, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    settings = Settings.from_env(namespace=namespace, sink_linger_ms=50)
    client = connect(settings)

    def count() -> int:
        query = "SELECT count() FROM turnstream.worker_metrics WHERE worker_id = %(w)s"
        return client.query(query, parameters={"w": worker}).result_rows[0][0]

    async def sink_until_written() -> None:
        async with run_sink(settings, client, ("metrics",)):
            async with asyncio.timeout(120):
                while await asyncio.to_thread(count) < expected:
                    await asyncio.sleep(0.1)

    asyncio.run(sink_until_written())
    minutely = client.query(
        "SELECT sum(samples), max(batch_max), max(queue_depth_max), max(in_flight_max), "
        "max(kv_usage_max), sum(generation_tokens), sum(prompt_tokens), any(model) "
        "FROM turnstream.infra_minutely WHERE worker_id = %(w)s",
        parameters={"w": worker},
    ).result_rows[0]
    report = gather(client, hours=1)
    page = render(report, "report.png")
    plot(report, Path(out) / "report.png")
    print(json.dumps({
        "rows": count(),
        "minutely": list(minutely),
        "report_workers": [r[0] for r in report.infra],
        "page_says": "1 workers; batch size" in page,
        "png_bytes": (Path(out) / "report.png").stat().st_size,
    }))
""")


async def test_worker_metrics_reach_clickhouse_and_the_minutely_view(services, tmp_path):
    settings = Settings.from_env(
        namespace=f"metrics-{uuid.uuid4().hex[:6]}", metrics_interval_ms=20.0
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    engine = HeldEngine()
    reader = MetricsReader(settings)
    await reader.start()
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        async with run_worker(settings, engine) as worker:
            conversation = new_conversation_id()
            for i, text in enumerate(["first question", "second question"]):
                turn = assembled(f"m-{uuid.uuid4().hex[:8]}-{i}", conversation, text)
                await producer.send_and_wait(
                    pool_topic(settings.pool).full_name(settings.namespace),
                    encode(turn),
                    conversation.encode(),
                )
            # The first turn generates (held), the second waits for it: its conversation's
            # turns go in order. A sample must show exactly that.
            await eventually(
                lambda: reader.seen(
                    lambda e: (
                        (e.running, e.queue_depth, e.in_flight) == (1, 1, 2)
                        and e.kv_cache_usage > 0
                    )
                )
            )
            engine.release.set()
            await eventually(lambda: worker.service.gauges.held == 0)
            await eventually(
                lambda: reader.seen(
                    lambda e: (
                        (e.running, e.queue_depth, e.in_flight) == (0, 0, 0)
                        and sum(x.generation_tokens for x in reader.events)
                        == engine.generation_tokens
                    )
                )
            )
        events = await reader.read_to_end()
    finally:
        await producer.stop()
        await reader.consumer.stop()
    [worker_id] = {e.worker_id for e in events}
    assert {e.model for e in events} == {"fake-echo"} and {e.pool for e in events} == {"chat"}
    # every token counted once across the samples' intervals, no interval overlapping
    assert sum(e.prompt_tokens for e in events) == engine.prompt_tokens > 0

    home = tmp_path / "home"
    args = (settings.namespace, worker_id, str(len(events)), str(tmp_path))
    out = await asyncio.to_thread(run_in_engine, SINK_AND_QUERY, home, *args)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["rows"] == len(events)
    samples, batch_max, queue_max, in_flight_max, kv_max, gen, prompt, model = result["minutely"]
    assert samples == len(events) and model == "fake-echo"
    # both turns may be sampled before the first reaches the engine: a queue of 2
    assert (batch_max, in_flight_max) == (1, 2) and queue_max in (1, 2) and 0 < kv_max <= 1
    assert gen == engine.generation_tokens and prompt == engine.prompt_tokens
    assert result["report_workers"] == [worker_id] and result["page_says"]
    assert result["png_bytes"] > 10_000


def vllm_request(max_tokens: int) -> GenerationRequest:
    system = "You are a helpful concise assistant answering questions about the world. " * 8
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=[Message(Role.SYSTEM, system), Message(Role.USER, "tell me about rivers")],
        decoding=DecodingParams(max_tokens=max_tokens, temperature=0.0),
    )


@pytest.mark.vllm
async def test_the_vllm_engine_reports_its_load_while_it_generates(tiny_engine):
    before = tiny_engine.snapshot()
    request = vllm_request(max_tokens=24)
    during = None
    tokens = 0
    async for delta in tiny_engine.stream(request):
        tokens += delta.new_tokens
        if during is None:  # the engine has this request in its batch right now
            during = tiny_engine.snapshot()
    interval = tiny_engine.snapshot().since(before)
    assert during is not None and during.running >= 1 and 0 < during.kv_cache_usage <= 1
    assert interval.running == 0 and interval.waiting == 0
    assert interval.generation_tokens == tokens > 0
    prompt_len = len(tiny_engine.render(request))
    # each prompt token was either computed or found in the prefix cache
    assert interval.prompt_tokens + interval.prefix_cache_hits == prompt_len
    assert interval.prefix_cache_queries == prompt_len

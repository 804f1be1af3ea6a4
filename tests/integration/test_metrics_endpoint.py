"""A turn through the real pipeline shows on the Prometheus endpoint: latency histograms,
tokens, the edge's frames and connections, consumer lag (the services of the test pipeline
run in this process, so they share its registry; the endpoint is a real HTTP server)."""

from __future__ import annotations

import asyncio

import pytest

from harness.factories import new_conversation_id as conv
from harness.metrics import free_port, scrape, value
from harness.polling import eventually
from harness.stack import pipeline, running_assembly, running_job
from runtime.prometheus import serve_metrics
from runtime.settings import Settings
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient

pytestmark = pytest.mark.integration


async def test_a_turn_shows_on_the_metrics_endpoint(fake_pipeline):
    port = free_port()
    serve_metrics(port)

    before = await asyncio.to_thread(scrape, port)
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        done = await client.ask(conv(), "count my tokens please")
        during = await asyncio.to_thread(scrape, port)
    after = await asyncio.to_thread(scrape, port)
    ttft = "gen_ai_server_time_to_first_token_seconds_count"
    assert value(after, ttft) >= value(before, ttft) + 1
    tokens = "gen_ai_server_token_usage_total"
    assert value(after, tokens) >= value(before, tokens) + done.usage.completion_tokens
    assert value(after, "turnstream_edge_frames_total") > value(
        before, "turnstream_edge_frames_total"
    )
    assert value(during, "turnstream_edge_connections") >= 1
    assert 'finish_reason="stop"' in after
    assert "turnstream_consumer_lag_records{" in after  # the workers' consumers report lag


async def test_the_stream_jobs_serve_their_metrics(services, session_namespace):
    """The faust jobs run as their own processes, each with its endpoint: faust's sensor
    counts what they read and sent, and their consumer lag is the same series as the
    workers' (group = the job's app id)."""
    settings = Settings.from_env(namespace=f"{session_namespace}-jobmetrics", edge_port=0)
    assembly_port, traces_port = free_port(), free_port()
    async with (
        pipeline(settings, FakeEngine(token_interval_s=0.001), with_assembly=False) as p,
        running_assembly(settings, TURNSTREAM_METRICS_PORT=str(assembly_port)),
        running_job(settings, "traces", TURNSTREAM_METRICS_PORT=str(traces_port)),
        EdgeClient.connect(p.url, p.token()) as client,
    ):
        await client.ask(conv(), "are the jobs measured?")

        async def counted(port: int) -> bool:
            text = await asyncio.to_thread(scrape, port)
            return value(text, "faust_messages_received_total") >= 1

        await eventually(lambda: counted(assembly_port))
        await eventually(lambda: counted(traces_port))
        assembly = await asyncio.to_thread(scrape, assembly_port)
        traces = await asyncio.to_thread(scrape, traces_port)
    ns = settings.namespace
    assert f'turnstream_consumer_lag_records{{group="{ns}.assembly",' in assembly
    assert f'turnstream_consumer_lag_records{{group="{ns}.traces",' in traces
    assert value(assembly, "faust_topic_messages_sent_total") >= 1  # the assembled turn
    assert value(assembly, "faust_events_runtime_ms_count") >= 1

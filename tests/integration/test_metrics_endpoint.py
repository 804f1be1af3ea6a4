"""A turn through the real pipeline shows on the Prometheus endpoint: latency histograms,
tokens, the edge's frames and connections, consumer lag (the services of the test pipeline
run in this process, so they share its registry; the endpoint is a real HTTP server)."""

from __future__ import annotations

import asyncio
import re
import socket
import urllib.request

import pytest

from schemas.prometheus import serve_metrics
from tests.support.factories import new_conversation_id as conv
from ws_edge.client import EdgeClient

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def value(text: str, series: str) -> float:
    """The summed value of every sample of `series` (a name, or a name{labels} prefix)."""
    pattern = re.compile(rf"^{re.escape(series)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


async def test_a_turn_shows_on_the_metrics_endpoint(fake_pipeline):
    port = free_port()
    serve_metrics(port)

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            return r.read().decode()

    before = await asyncio.to_thread(scrape)
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        done = await client.ask(conv(), "count my tokens please")
        during = await asyncio.to_thread(scrape)
    after = await asyncio.to_thread(scrape)
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

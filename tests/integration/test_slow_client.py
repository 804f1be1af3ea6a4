"""A client that never reads: the edge stops queueing for it at the outbox bound and closes
it (1013, slow consumer) instead of holding its answers in memory, while a client of the
same edge that reads gets its answers in full."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from harness.factories import new_conversation_id as conv
from harness.sockets import tiny_socket
from ws_edge.client import EdgeClient
from ws_edge.server import EdgeServer

pytestmark = pytest.mark.integration

# the fake engine echoes it word by word: one long word makes few, big frames (fast to pile up)
QUESTION = "y" * 3900


async def test_a_client_that_never_reads_is_closed_and_others_are_served(fake_pipeline, tmp_path):
    # a tenant whose rate limits let it flood (the bound under test is the outbox's)
    registry = tmp_path / "tenants.json"
    unlimited = {"requests_per_minute": 600_000, "request_burst": 100_000}
    registry.write_text(
        json.dumps({"tenants": {"flood": {"tier": "enterprise", "limits": unlimited}}})
    )
    settings = dataclasses.replace(
        fake_pipeline.settings,
        edge_port=0,
        outbox_max_bytes=32_768,
        tenant_registry_path=str(registry),
    )
    edge = EdgeServer(settings)
    await edge.start()
    url = f"ws://127.0.0.1:{edge.port}/?token={fake_pipeline.token('sloth', 'flood')}"
    try:
        async with connect(url, sock=tiny_socket(edge.port), max_queue=1) as sloth:
            async with asyncio.timeout(120):
                while edge.slow_clients_closed == 0:  # it sends turns and never reads
                    frame = {"type": "turn.create", "conversation_id": conv(), "text": QUESTION}
                    with contextlib.suppress(ConnectionClosed):
                        await sloth.send(json.dumps(frame))
                    await asyncio.sleep(0.02)
            async with EdgeClient.connect(
                f"ws://127.0.0.1:{edge.port}/", fake_pipeline.token("reader", "flood")
            ) as reader:
                done = await reader.ask(conv(), "short and sweet")
            assert done.finish_reason == "stop" and done.text.startswith("You said: short")
            with pytest.raises(ConnectionClosed) as closed:  # what was sent, then the close
                async with asyncio.timeout(60):
                    while True:
                        await sloth.recv()
        assert edge.slow_clients_closed == 1
        if closed.value.rcvd is not None:  # the close frame got through the backlog
            assert closed.value.rcvd.code == 1013
    finally:
        await edge.stop()

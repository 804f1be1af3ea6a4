"""The SSE writer's wait: queued frames at once, nothing after the heartbeat interval."""

from __future__ import annotations

import asyncio

from ws_edge.http.app import _take
from ws_edge.outbox import Outbox


async def test_an_idle_stream_gets_nothing_after_the_interval_so_a_heartbeat_goes_out():
    outbox = Outbox()
    assert await _take(outbox, 0.01) == []


async def test_queued_frames_are_taken_at_once_and_a_late_one_ends_the_wait():
    outbox = Outbox()
    outbox.put("data: a\n\n")
    outbox.put("data: b\n\n")
    assert await _take(outbox, 10) == ["data: a\n\n", "data: b\n\n"]
    asyncio.get_running_loop().call_later(0.01, outbox.put, "data: c\n\n")
    assert await _take(outbox, 10) == ["data: c\n\n"]

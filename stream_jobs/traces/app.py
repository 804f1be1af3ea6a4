"""The traces job: a faust agent over the turn topics, a table of unfinished traces.

The table is keyed by turn id; a turn's events share a partition (keyed by conversation),
so its row lives there too. When a trace is complete it goes to Kafka `traces` and the row
is deleted. A completed turn seen again (a redelivery) is recognised by a short memory of
recent turn ids, so the sink's deduplication is the second line, not the first.
"""

from __future__ import annotations

import logging

import faust

from schemas.codec import decode, encode
from schemas.errors import DecodeError
from schemas.settings import Settings
from schemas.topics import (
    TRACES,
    TURNS_ASSEMBLED,
    TURNS_COMPLETED,
    TURNS_ENRICHED,
    TURNS_SUBMITTED,
)
from stream_jobs.faust_app import make_app
from stream_jobs.traces.state import decode_pending, encode_pending, on_event

log = logging.getLogger("turnstream.traces")

RECENT = 4096  # emitted turn ids remembered per process


def create_app(settings: Settings) -> faust.App:
    return make_app(settings, "traces")


class TracesJob:
    def __init__(self, app: faust.App, settings: Settings) -> None:
        ns = settings.namespace
        sources = (TURNS_SUBMITTED, TURNS_ENRICHED, TURNS_ASSEMBLED, TURNS_COMPLETED)
        self.source = app.topic(*(t.full_name(ns) for t in sources))
        self.traces = app.topic(TRACES.full_name(ns))
        self.table = app.Table(
            "pending", partitions=TURNS_SUBMITTED.partitions, key_type=bytes, value_type=bytes
        )
        self.recent: dict[str, None] = {}
        app.agent(self.source, name="join")(self._consume)

    async def _consume(self, stream: faust.Stream) -> None:
        async for payload in stream:
            try:
                event = decode(payload)
            except DecodeError as err:
                log.warning("skipping an undecodable event: %s", err)  # dead-lettered upstream
                continue
            if event.turn_id in self.recent:
                continue
            key = event.turn_id.encode()
            pending = decode_pending(self.table.get(key))
            trace = on_event(pending, event)
            if trace is None:
                self.table[key] = encode_pending(pending)
                continue
            await self.traces.send(
                key=trace.submitted.conversation_id.encode(), value=encode(trace)
            )
            self.table.pop(key, None)
            self.recent[event.turn_id] = None
            if len(self.recent) > RECENT:
                del self.recent[next(iter(self.recent))]

"""Abandonment inferred on the real pipeline: a client that leaves mid-answer and does not
come back within the window has abandoned it (an inferred `abandon` feedback record, once);
one that resumes the turn within the window has not (no record)."""

from __future__ import annotations

import pytest

from harness.factories import new_conversation_id as conv
from harness.kafka import find_record, records_so_far
from harness.polling import eventually
from harness.stack import another_edge
from schemas.codec import decode
from schemas.events import FeedbackGiven, FeedbackKind
from schemas.topics import FEEDBACK
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta, ResponseDone

pytestmark = pytest.mark.integration

LONG_QUESTION = " ".join(f"{i % 10}w" for i in range(600))  # ~3 s of fake answer
WINDOW_S = 1.0


async def leave_mid_answer(url: str, token: str) -> tuple[str, object]:
    """Start a long answer, read a few deltas, disconnect: (turn id, resume position)."""
    async with EdgeClient.connect(url, token) as client:
        turn_id = await client.start_turn(conv(), LONG_QUESTION, max_tokens=600)
        seen = 0
        async for event in client.events(turn_id):
            if isinstance(event, ResponseDelta):
                seen += 1
                if seen == 3:
                    break
        return turn_id, client.positions[turn_id]


async def test_leaving_mid_answer_without_coming_back_is_an_inferred_abandon(fake_pipeline):
    settings = fake_pipeline.settings
    topic = FEEDBACK.full_name(settings.namespace)
    token = fake_pipeline.token("leaver", "acme")
    async with another_edge(fake_pipeline, "abandon", abandon_window_s=WINDOW_S) as edge:
        url = f"ws://127.0.0.1:{edge.port}/"
        gone, _ = await leave_mid_answer(url, token)
        back, where = await leave_mid_answer(url, token)
        async with EdgeClient.connect(fake_pipeline.url, token) as again:  # another edge
            resumed = await again.resume(back, after=where)
            assert resumed.status == "resumed"
            async for event in again.events(back):
                if isinstance(event, ResponseDone):
                    break
        record = await find_record(
            settings.kafka_bootstrap, topic, lambda r: gone.encode() in r.value, wait_s=30
        )
        feedback = decode(record.value)
        assert isinstance(feedback, FeedbackGiven)
        assert feedback.kind == FeedbackKind.ABANDON and feedback.inferred
        assert (feedback.tenant_id, feedback.user_id) == ("acme", "leaver")
        due = fake_pipeline.edge.names.departures_key()

        async def swept() -> bool:  # the resumed turn's window ended and an edge looked
            scores = [await fake_pipeline.edge.redis.zscore(due, t) for t in (gone, back)]
            return scores == [None, None]

        await eventually(swept, timeout_s=30)
        assert "1 s" in feedback.comment  # the window of the edge it left
    mentioned = await records_so_far(
        settings.kafka_bootstrap,
        topic,
        lambda r: back.encode() in r.value or gone.encode() in r.value,
    )
    assert [decode(r.value).turn_id for r in mentioned] == [gone]  # once; none for the return

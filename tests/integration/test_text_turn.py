"""One text turn end to end on the real Kafka and Redis, with the fake engine."""

from __future__ import annotations

import asyncio

import pytest

from harness.factories import new_conversation_id as conv
from harness.kafka import assembled_prompt, completions_of, find_record, turn_event
from schemas.codec import decode
from schemas.events import FinishReason, Role, TurnCompleted, TurnEnriched
from schemas.topics import TURNS_ENRICHED
from tests.integration.conftest import FAIL_TRIGGER
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta, ResponseDone, ResponseStarted

pytestmark = pytest.mark.integration


async def test_answer_streams_as_deltas_then_done_with_usage_and_timings(fake_pipeline):
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        turn_id = await client.start_turn(conv(), "what is streaming")
        events = [e async for e in client.events(turn_id)]
    assert isinstance(events[0], ResponseStarted) and events[0].model == "fake-echo"
    deltas = [e for e in events if isinstance(e, ResponseDelta)]
    done = events[-1]
    assert isinstance(done, ResponseDone)
    # seq starts at 0 and increases; a skipped number means the edge joined frames
    seqs = [d.seq for d in deltas]
    assert len(deltas) > 1 and seqs[0] == 0 and seqs == sorted(set(seqs))
    assert "".join(d.text for d in deltas) == done.text == "You said: what is streaming (turn 1)"
    assert done.finish_reason == FinishReason.STOP
    # one engine delta per token here; the edge may join some into one frame
    tokens = done.usage.completion_tokens
    assert tokens >= len(deltas) and tokens == 7 and done.usage.prompt_tokens > 0
    assert done.timings.ttft_ms is not None and done.timings.ttft_ms > 0
    assert len(done.timings.itl_ms) == tokens - 1


async def test_second_turn_sees_the_first(fake_pipeline):
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        first = await client.ask(conversation, "first")
        second = await client.ask(conversation, "second")
    assert first.text.endswith("(turn 1)")
    assert second.text.endswith("(turn 2)")  # the engine saw two user messages
    prompt = await assembled_prompt(fake_pipeline.settings, second.turn_id)
    assert [(m.role, m.content) for m in prompt.messages] == [
        (Role.USER, "first"),
        (Role.ASSISTANT, first.text),
        (Role.USER, "second"),
    ]
    assert prompt.context.history_messages == 2 and prompt.context.dropped_messages == 0


async def test_turns_of_one_conversation_are_answered_in_order(fake_pipeline):
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        ids = [await client.start_turn(conversation, f"q{i}") for i in range(3)]
        dones = [[e async for e in client.events(t)][-1] for t in ids]
    assert [d.text.rsplit(" ", 1)[-1] for d in dones] == ["1)", "2)", "3)"]


async def test_cancel_aborts_generation_and_history_keeps_what_was_shown(fake_pipeline):
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        turn_id = await client.start_turn(conversation, "word " * 300)
        shown = ""
        async for event in client.events(turn_id):
            if isinstance(event, ResponseDelta):
                shown += event.text
                if len(shown) > 20:
                    await client.cancel(turn_id)
            if isinstance(event, ResponseDone):
                done = event
    assert done.finish_reason == FinishReason.CANCELLED
    assert turn_id in fake_pipeline.engine.aborted
    assert done.text.startswith(shown) and len(done.text) < 200
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        after = await client.ask(conversation, "go on")
    history = (await assembled_prompt(fake_pipeline.settings, after.turn_id)).messages[:-1]
    assert history[-1].role == Role.ASSISTANT and history[-1].content == done.text


async def test_disconnect_does_not_cancel_the_turn(fake_pipeline):
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        left = await client.start_turn(conversation, "keep going " * 5)
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        later = await client.ask(conversation, "are you there")
    first = await turn_event(fake_pipeline.settings, "turns.completed", left)
    assert isinstance(first, TurnCompleted)
    assert first.finish_reason == FinishReason.STOP  # answered in full, not cancelled
    assert first.text.startswith("You said: keep going")
    assert later.text.endswith("(turn 2)")


async def test_engine_failure_closes_the_turn_in_band(fake_pipeline):
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        failed = await client.ask(conversation, FAIL_TRIGGER)
        after = await client.ask(conversation, "still there?")
    assert failed.finish_reason == FinishReason.ERROR
    assert failed.error is not None and failed.error.code == "engine_error"
    assert after.finish_reason == FinishReason.STOP
    assert after.text.endswith("(turn 1)")  # the failed turn left no history


async def test_retry_with_client_turn_id_is_answered_once(fake_pipeline):
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        first = await client.ask(conversation, "idempotent", client_turn_id="retry-1")
        again = await client.ask(conversation, "idempotent", client_turn_id="retry-1")
    assert again.turn_id == first.turn_id and again.text == first.text
    assert fake_pipeline.engine.requests.count(first.turn_id) == 1  # generated once
    assert await completions_of(fake_pipeline.settings, first.turn_id) == 1  # recorded once


async def test_completed_turns_are_recorded_in_kafka(fake_pipeline):
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        done = await client.ask(conv(), "record me")
    settings = fake_pipeline.settings
    record = await find_record(
        settings.kafka_bootstrap,
        f"{settings.namespace}.turns.completed",
        lambda r: decode(r.value).turn_id == done.turn_id,
    )
    found = decode(record.value)
    assert isinstance(found, TurnCompleted)
    assert found.text == done.text and found.tenant_id == "acme" and found.user_id == "alice"


async def test_concurrent_turns_on_one_connection_are_matched_to_their_answers(fake_pipeline):
    async def answer(client: EdgeClient, turn_id: str) -> ResponseDone:
        return [e async for e in client.events(turn_id)][-1]

    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        questions = [f"question number {i}" for i in range(4)]
        turn_ids = await asyncio.gather(*(client.start_turn(conv(), q) for q in questions))
        dones = await asyncio.gather(*(answer(client, t) for t in turn_ids))
    assert len(set(turn_ids)) == 4
    for question, done in zip(questions, dones, strict=True):
        assert done.text == f"You said: {question} (turn 1)"


async def test_a_typed_turn_is_published_enriched_with_the_language_it_is_written_in(
    fake_pipeline,
):
    written = {
        "¿Cuál es la mejor manera de aprender a tocar la guitarra?": "es",
        "東京で一番おいしいラーメン屋はどこですか": "ja",
        "ok": "",  # too little to tell
    }
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        dones = {text: await client.ask(conv(), text) for text in written}
    settings = fake_pipeline.settings
    found = {}
    for text, done in dones.items():
        record = await find_record(
            settings.kafka_bootstrap,
            TURNS_ENRICHED.full_name(settings.namespace),
            lambda r, turn=done.turn_id: turn.encode() in r.value,
        )
        enriched = decode(record.value)
        assert isinstance(enriched, TurnEnriched)
        found[text] = (enriched.text_language, enriched.language)  # spoken stays unset
    assert found == {text: (language, "") for text, language in written.items()}

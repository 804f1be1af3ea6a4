"""Audio and image turns through the real pipeline: edge → blob store + Kafka → preprocessing
(real Silero VAD, real Whisper, real Pillow) → inference (fake engine: it echoes what it was
given) → the user; and bad media answered with precise errors while others keep being served."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from harness.kafka import assembled_prompt, find_record
from harness.media import (
    bilevel_png,
    encode_image,
    encode_opus,
    espeak_wav,
    noise_image,
    pcm16,
    quiet_room,
    words,
)
from runtime.blobs import sha256_hex
from schemas.codec import decode
from schemas.events import FinishReason, TurnCompleted, TurnEnriched
from schemas.topics import TURNS_ENRICHED
from workers.preprocess.audio_decode import decode_audio
from workers.runtime.tensors import tensor_from_bytes
from ws_edge.client import EdgeClient, audio_part, image_part
from ws_edge.messages import InputTranscript, ResponseDone, ResponseStarted

pytestmark = pytest.mark.integration

QUESTION = "What is the capital of France?"


def conv() -> str:
    return f"media-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def spoken_question() -> np.ndarray:
    """The question as 16 kHz float samples, between stretches of a quiet room."""
    speech = decode_audio(espeak_wav(QUESTION), max_seconds=30, max_bytes=10_000_000)
    return np.concatenate([quiet_room(1.0), speech, quiet_room(0.8, seed=8)])


async def answer_events(client: EdgeClient, turn_id: str) -> list:
    return [event async for event in client.events(turn_id)]


async def test_a_spoken_question_is_transcribed_then_answered(fake_pipeline, spoken_question):
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        turn_id = await client.start_turn(
            conversation, "", parts=[audio_part(encode_opus(spoken_question, "webm"))]
        )
        events = await answer_events(client, turn_id)
    kinds = [type(e) for e in events]
    assert kinds.index(InputTranscript) < kinds.index(ResponseStarted)  # heard, then answered
    transcript = next(e for e in events if isinstance(e, InputTranscript))
    assert {"capital", "france"} <= set(words(transcript.text))
    [segment] = transcript.segments
    assert 0.6 < segment.start_s < 1.2  # after the second of silence before the question
    assert transcript.audio_s == pytest.approx(len(spoken_question) / 16000, abs=0.1)
    done = events[-1]
    assert isinstance(done, ResponseDone) and done.finish_reason == FinishReason.STOP
    assert "france" in words(done.text)  # the engine answered the transcript
    prompt = await assembled_prompt(fake_pipeline.settings, turn_id)
    assert "capital" in words(prompt.messages[-1].content)  # the model read what was said


async def test_microphone_audio_streamed_in_pieces(fake_pipeline, spoken_question):
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        await client.append_audio("mic", pcm16(spoken_question))
        done = await client.ask(conv(), "", parts=[audio_part(stream_id="mic")])
    assert done.finish_reason == FinishReason.STOP
    assert {"capital", "france"} <= set(words(done.text))


async def test_text_and_audio_together(fake_pipeline, spoken_question):
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        clip = pcm16(spoken_question)
        done = await client.ask(
            conv(), "Answer briefly.", parts=[audio_part(clip, pcm16_rate=16000)]
        )
    assert done.text.startswith("You said: Answer briefly.")
    assert "france" in words(done.text)


async def test_images_reach_the_engine_with_placeholders(fake_pipeline):
    photo = encode_image(noise_image(640, 480), "JPEG", quality=85)
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        done = await client.ask(
            conversation,
            "What is in these pictures?",
            parts=[image_part(photo), image_part(encode_image(noise_image(64, 64, 1), "PNG"))],
        )
    assert done.finish_reason == FinishReason.STOP
    assert "<image_1>\n<image_2>\nWhat is in these pictures?" in done.text
    assert "2 images" in done.text
    vision = fake_pipeline.preprocess.service.images
    tensor = await fake_pipeline.edge.blobs.get(vision.tensor_key(sha256_hex(photo)))
    assert tensor_from_bytes(tensor).shape == (3, 336, 336)


async def test_the_same_image_again_reuses_its_tensor(fake_pipeline):
    picture = encode_image(noise_image(100, 80, 2), "PNG")
    vision = fake_pipeline.preprocess.service.images
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        first = await client.ask(conv(), "one", parts=[image_part(picture)])
        hits = vision.stats.tensor_hits
        done = await client.ask(conv(), "two", parts=[image_part(picture)])
    assert done.finish_reason == FinishReason.STOP and "1 images" in done.text
    assert vision.stats.tensor_hits == hits + 1
    # the turn says so (its trace counts image_cache_hits from it)
    settings = fake_pipeline.settings
    cached = []
    for turn in (first.turn_id, done.turn_id):
        record = await find_record(
            settings.kafka_bootstrap,
            TURNS_ENRICHED.full_name(settings.namespace),
            lambda r, turn=turn: turn.encode() in r.value,
        )
        enriched = decode(record.value)
        assert isinstance(enriched, TurnEnriched) and enriched.enriched_at_ms > 0
        cached.append([image.cached for image in enriched.images])
    assert cached == [[False], [True]]


BAD_MEDIA = {
    "audio_unreadable": lambda q: [audio_part(encode_opus(q, "webm")[:400])],
    "no_speech": lambda q: [audio_part(pcm16(quiet_room(2.0)), pcm16_rate=16000)],
    "audio_too_long": lambda q: [
        audio_part(pcm16(np.zeros(16000 * 40, np.float32)), pcm16_rate=16000)
    ],
    "unsupported_media": lambda q: [image_part(b"<svg xmlns='http://www.w3.org/2000/svg'/>")],
    "image_too_large": lambda q: [image_part(bilevel_png(8000, 6300))],
    "image_unreadable": lambda q: [image_part(encode_image(noise_image(64, 64), "PNG")[:300])],
    "url_blocked": lambda q: [image_part(url="https://127.0.0.1/cat.png")],
}


@pytest.mark.parametrize("code", sorted(BAD_MEDIA))
async def test_bad_media_ends_the_turn_with_a_precise_error(fake_pipeline, spoken_question, code):
    settings = fake_pipeline.settings
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        turn_id = await client.start_turn(conv(), "", parts=BAD_MEDIA[code](spoken_question))
        events = await answer_events(client, turn_id)
        done = events[-1]
        assert isinstance(done, ResponseDone) and done.finish_reason == FinishReason.ERROR
        assert done.error is not None and done.error.code == code, done.error
        assert not any(isinstance(e, ResponseStarted) for e in events)  # never reached the GPU
        still = await client.ask(conv(), "still there?")  # the system keeps serving
    assert still.finish_reason == FinishReason.STOP
    record = await find_record(
        settings.kafka_bootstrap,
        f"{settings.namespace}.turns.completed",
        lambda r: turn_id.encode() in r.value,
    )
    recorded = decode(record.value)
    assert isinstance(recorded, TurnCompleted) and recorded.error.code == code

"""Spoken turns in English, Spanish and Chinese on the real pipeline (Kafka, Redis, the
preprocessing worker with the multilingual Whisper base, the assembly job, the fake engine
that echoes the question, the TTS worker): the language is detected (or taken from the
client's hint), reaches the client with the transcript, the prompt names it, and the answer
is spoken by a voice of that language (espeak-ng's, piper's joe speaking English only)."""

from __future__ import annotations

import base64
import contextlib
import uuid

import numpy as np
import pytest

from harness.factories import new_conversation_id as conv
from harness.kafka import assembled_prompt
from harness.media import quiet_room, voiced, wav16, words
from harness.stack import pipeline
from runtime.settings import Settings
from runtime.whisper_models import base_path
from workers.inference.engines.fake_engine import FakeEngine
from workers.preprocess.asr import WhisperTranscriber
from workers.preprocess.audio_decode import decode_pcm16
from workers.preprocess.vad import SpeechSegment
from workers.tts.voices import espeak_for
from ws_edge.client import EdgeClient, audio_part
from ws_edge.messages import (
    InputTranscript,
    ResponseAudio,
    ResponseAudioDone,
    ResponseDone,
    SpeechOptions,
)

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def multilingual_stack():
    settings = Settings.from_env(
        namespace=f"langs-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        safety_output_policy="off",
        asr_model="multilingual",
    )
    async with (
        pipeline(settings, FakeEngine(token_interval_s=0.01), with_tts=True) as running,
        EdgeClient.connect(running.url, running.token()) as client,
    ):
        yield settings, client


def question(language: str, text: str) -> bytes:
    """A WAV of espeak-ng saying `text` in `language`."""
    voice = espeak_for(language)
    assert voice is not None
    return wav16(np.concatenate([quiet_room(0.2), voiced(voice, text), quiet_room(0.3)]))


async def ask(client: EdgeClient, part) -> tuple[str, list]:
    turn_id = await client.start_turn(conv(), "", parts=[part], speech=SpeechOptions("joe"))
    return turn_id, [e async for e in client.events(turn_id, speech=True)]


def spoken(events: list, settings: Settings, hint: str | None = None):
    """The answer's audio as Whisper base hears it (detecting the language without a hint)."""
    pcm = b"".join(base64.b64decode(e.audio) for e in events if isinstance(e, ResponseAudio))
    clip = decode_pcm16(pcm, 22050, max_seconds=120, max_bytes=50_000_000)
    whisper = WhisperTranscriber(
        base_path(settings.state_path / "models"), cpu_threads=2, language=None
    )
    segments = [SpeechSegment(0.0, len(clip) / 16_000)]
    return whisper.transcribe(clip, segments, language=hint)


async def test_spanish_english_and_chinese_turns_are_heard_prompted_and_spoken_in_their_language():
    async with multilingual_stack() as (settings, client):
        spanish = "Quiero reservar una mesa para cuatro personas esta noche."
        turn_id, events = await ask(client, audio_part(question("es", spanish)))
        transcript = next(e for e in events if isinstance(e, InputTranscript))
        assert transcript.language == "es"
        assert len(set(words(spanish)) & set(words(transcript.text))) >= 4, transcript.text
        prompt = await assembled_prompt(settings, turn_id)
        assert "Answer in Spanish." in prompt.messages[0].content
        assert prompt.language == "es"
        done = next(e for e in events if isinstance(e, ResponseDone))
        audio = [e for e in events if isinstance(e, ResponseAudio)]
        assert "".join(a.text for a in audio) == done.text
        assert isinstance(events[-1], ResponseAudioDone) and events[-1].reason == "completed"
        # the echo ("You said: Quiero ...") was read by a Spanish voice: Whisper hears Spanish
        assert spoken(events, settings).language == "es"

        english = "Can you tell me how to get to the train station?"
        turn_id, events = await ask(client, audio_part(question("en", english)))
        transcript = next(e for e in events if isinstance(e, InputTranscript))
        assert transcript.language == "en" and {"train", "station"} <= set(words(transcript.text))
        prompt = await assembled_prompt(settings, turn_id)
        assert "Answer in" not in (prompt.messages[0].content if prompt.messages else "")

        chinese = "我想订一张今天晚上四个人的桌子。"
        part = audio_part(question("zh", chinese), language="zh")  # the client's hint
        turn_id, events = await ask(client, part)
        transcript = next(e for e in events if isinstance(e, InputTranscript))
        assert transcript.language == "zh"
        han = {c for c in transcript.text if "\u4e00" <= c <= "\u9fff"}
        assert len(han & set(chinese)) >= 4, transcript.text
        prompt = await assembled_prompt(settings, turn_id)
        assert "Answer in Chinese." in prompt.messages[0].content
        audio = [e for e in events if isinstance(e, ResponseAudio)]
        assert sum(a.duration_ms for a in audio) > 500  # spoken, through pinyin
        answer = next(e for e in events if isinstance(e, ResponseDone)).text
        heard = {c for c in spoken(events, settings, hint="zh").text if "\u4e00" <= c <= "\u9fff"}
        assert len(heard & set(answer)) >= 3, (heard, answer)  # Mandarin, not English

"""Speech out and barge-in on the real pipeline (Kafka, Redis, the preprocessing worker with
VAD and Whisper, the TTS worker with piper and espeak-ng, the fake engine, which echoes the
question): spoken answers transcribe back to their text; an interrupt stops generation and
speech and the history keeps only what was heard; the voice loop answers utterances, lets a
backchannel pass and stops the assistant when the user talks over it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from functools import partial

import numpy as np
import pytest

from harness.factories import new_conversation_id as conv
from harness.kafka import assembled_prompt, find_record, turn_event
from harness.media import espeak_wav, pcm16, quiet_room, spoken, voiced, words
from harness.stack import pipeline
from runtime.settings import Settings
from schemas.codec import decode
from schemas.events import FinishReason, Role, SpeechDelivered, TurnSubmitted
from schemas.topics import TURNS_COMPLETED
from workers.inference.engines.fake_engine import FakeEngine
from workers.preprocess.asr import WhisperTranscriber
from workers.preprocess.audio_decode import decode_pcm16
from workers.preprocess.vad import SAMPLE_RATE, SpeechSegment
from workers.tts.voices import EspeakSpeaker, Voice
from ws_edge.client import EdgeClient, audio_part
from ws_edge.messages import (
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscript,
    InputTranscriptInterim,
    ResponseAudio,
    ResponseAudioDone,
    ResponseDelta,
    ResponseDone,
    ResponseTruncated,
    SpeechOptions,
    TurnAccepted,
    TurnDetection,
)

pytestmark = pytest.mark.integration

LONG_QUESTION = " ".join(f"Tell me about city number {i}." for i in range(12))


@contextlib.asynccontextmanager
async def stack(
    token_interval_s: float = 0.02, policy: str = "off", *, with_tts: bool = True, **more
):
    engine = FakeEngine(token_interval_s=token_interval_s)
    settings = Settings.from_env(
        namespace=f"speech-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        safety_output_policy=policy,
        safety_window_tokens=20,
        safety_window_overlap=5,
        **more,
    )
    async with (
        pipeline(settings, engine, with_tts=with_tts, with_safety=policy != "off") as running,
        EdgeClient.connect(running.url, running.token()) as client,
    ):
        yield running, engine, client


def transcribe(pcm: bytes, sample_rate: int) -> str:
    clip = decode_pcm16(pcm, sample_rate, max_seconds=120, max_bytes=50_000_000)
    whisper = WhisperTranscriber(cpu_threads=2)
    return whisper.transcribe(clip, [SpeechSegment(0.0, len(clip) / SAMPLE_RATE)]).text


async def in_real_time(client: EdgeClient, pcm: bytes) -> None:
    """Stream `pcm` to the voice loop as a microphone does: 32 ms every 32 ms."""
    for offset in range(0, len(pcm), 1024):
        await client.append_audio("mic", pcm[offset : offset + 1024])
        await asyncio.sleep(0.032)


async def say_with_a_pause(
    client: EdgeClient, first: str, pause_s: float, rest: str, voice: Voice | None = None
) -> None:
    """Half a second of room, then `first`, a pause, `rest` and 1.5 s of room, in real time
    (English espeak-ng unless `voice` says them)."""
    await client.append_audio("mic", pcm16(quiet_room(0.5)))
    say = partial(voiced, voice, trim=True) if voice else partial(spoken, trim=True)
    speech = [say(first), quiet_room(pause_s), say(rest)]
    await in_real_time(client, pcm16(np.concatenate([*speech, quiet_room(1.5)])))


async def collect(client: EdgeClient, turn_id: str) -> list:
    return [e async for e in client.events(turn_id, speech=True)]


async def test_a_spoken_question_gets_a_spoken_answer_that_says_its_text():
    async with stack() as (_, _, client):
        question = audio_part(espeak_wav("What is the capital of France?"))
        turn_id = await client.start_turn(conv(), "", parts=[question], speech=SpeechOptions("joe"))
        events = await collect(client, turn_id)
    transcript = next(e for e in events if isinstance(e, InputTranscript))
    assert {"capital", "france"} <= set(words(transcript.text))
    done = next(e for e in events if isinstance(e, ResponseDone))
    audio = [e for e in events if isinstance(e, ResponseAudio)]
    assert [a.index for a in audio] == list(range(len(audio)))
    assert len(audio) >= 2  # cut into pieces, not spoken in one go at the end
    assert "".join(a.text for a in audio) == done.text  # every character spoken, in order
    assert all(a.char_start == len("".join(b.text for b in audio[: a.index])) for a in audio)
    assert isinstance(events[-1], ResponseAudioDone) and events[-1].reason == "completed"
    assert {a.sample_rate for a in audio} == {22050}
    pcm = b"".join(base64.b64decode(a.audio) for a in audio)
    assert sum(a.duration_ms for a in audio) == pytest.approx(len(pcm) / 2 / 22.05, rel=1e-3)
    heard = set(words(transcribe(pcm, 22050)))
    said = words(done.text)
    assert len([w for w in said if w in heard]) >= 0.7 * len(said), (heard, said)


async def test_an_interrupt_stops_generation_and_speech_and_truncates_the_history():
    async with stack(token_interval_s=0.05) as (running, engine, client):
        conversation = conv()
        turn_id = await client.start_turn(
            conversation, LONG_QUESTION, speech=SpeechOptions("espeak")
        )
        events = []
        async for event in client.events(turn_id, speech=True):
            events.append(event)
            if isinstance(event, ResponseAudio):
                first = event
                # the user heard exactly the first piece, then talked over the rest
                await client.interrupt(turn_id, audio_end_ms=first.duration_ms)
                events.append("interrupted")
                break
        events += [e async for e in client.events(turn_id, speech=True)]
        after = events[events.index("interrupted") + 1 :]
        stop = next(e for e in after if isinstance(e, ResponseAudioDone))
        assert stop.reason == "interrupted"
        # frames already on the wire when the interrupt left may come; none after audio.done
        assert not any(isinstance(e, ResponseAudio) for e in after[after.index(stop) :])
        truncated = next(e for e in after if isinstance(e, ResponseTruncated))
        assert truncated.text == first.text and truncated.audio_end_ms == first.duration_ms
        done = next(e for e in after if isinstance(e, ResponseDone))
        assert done.finish_reason == FinishReason.CANCELLED  # generation stopped mid-answer
        assert turn_id in engine.aborted
        shown = "".join(e.text for e in events if isinstance(e, ResponseDelta))
        assert len(shown) < len(f"You said: {LONG_QUESTION}")

        next_turn = await client.start_turn(conversation, "Go on.")
        async for _ in client.events(next_turn):
            pass
        prompt = await assembled_prompt(running.settings, next_turn)
    answers = [m.content for m in prompt.messages if m.role == Role.ASSISTANT]
    assert answers == [first.text.rstrip()]  # the history keeps only what was heard


async def a_long_answer_speaking(client: EdgeClient) -> tuple[str, list]:
    """A voice loop (espeak) asks a long question; its answer's events until the first audio,
    which has then been playing for 1.2 s."""
    updated = await client.update_session(
        speech=SpeechOptions("espeak"),
        turn_detection=TurnDetection(conversation_id=conv(), stream_id="mic"),
    )
    assert updated.speech == SpeechOptions("espeak") and "joe" in updated.voices
    utterance = np.concatenate([quiet_room(0.5), spoken(LONG_QUESTION), quiet_room(1.0)])
    await client.append_audio("mic", pcm16(utterance))
    started = await client.next_event()
    assert isinstance(started, InputSpeechStarted) and started.stream_id == "mic"
    accepted = await client.next_event()
    assert isinstance(accepted, TurnAccepted)
    events = []
    async for event in client.events(accepted.turn_id, speech=True):
        events.append(event)
        if isinstance(event, ResponseAudio):
            break
    # past the first second of the answer (TURNSTREAM_BARGE_IN_GRACE_MS): speech before it is
    # the user going on with their turn, not talk over the assistant's voice
    await asyncio.sleep(1.2)
    return accepted.turn_id, events


async def test_the_voice_loop_answers_ignores_a_backchannel_and_stops_when_talked_over():
    async with stack(token_interval_s=0.05) as (running, engine, client):
        turn_id, events = await a_long_answer_speaking(client)
        stopped = events[0]
        assert isinstance(stopped, InputSpeechStopped) and stopped.turn_id == turn_id

        # "uh-huh" over the assistant's voice: a backchannel, the answer goes on
        backchannel = np.concatenate([spoken("uh-huh"), quiet_room(0.8)])
        await client.append_audio("mic", pcm16(backchannel))
        assert isinstance(await client.next_event(), InputSpeechStarted)
        ignored = await client.next_event()
        assert isinstance(ignored, InputSpeechStopped) and ignored.ignored == "backchannel"
        assert turn_id not in engine.aborted

        # a real sentence over it: barge-in, the answer stops and the sentence is the next turn
        sentence = spoken("Wait, stop. What is the capital of Spain?")
        barge = np.concatenate([sentence, quiet_room(1.0)])
        await client.append_audio("mic", pcm16(barge))
        assert isinstance(await client.next_event(), InputSpeechStarted)
        events += [e async for e in client.events(turn_id, speech=True)]
        truncated = next(e for e in events if isinstance(e, ResponseTruncated))
        done = next(e for e in events if isinstance(e, ResponseDone))
        assert done.finish_reason == FinishReason.CANCELLED  # stopped while generating
        assert done.text.startswith(truncated.text)
        assert next(e for e in events if isinstance(e, ResponseAudioDone)).reason == "interrupted"
        accepted = await client.next_event()
        assert isinstance(accepted, TurnAccepted)
        rest = [e async for e in client.events(accepted.turn_id, speech=True)]
    transcript = next(e for e in rest if isinstance(e, InputTranscript))
    assert {"stop", "capital"} <= set(words(transcript.text))
    # for its trace: the turn says when the user's speech ended (before it was accepted: the
    # audio was sent at once, so by the silence after it), the edge recorded when its first
    # audio went out
    settings = running.settings
    submitted = await turn_event(settings, "turns.submitted", turn_id)
    assert isinstance(submitted, TurnSubmitted)
    wait_ms = submitted.submitted_at_ms - submitted.speech_ended_at_ms
    assert submitted.speech_ended_at_ms > 0 and 0 < wait_ms < 2_000, wait_ms
    record = await find_record(
        settings.kafka_bootstrap,
        TURNS_COMPLETED.full_name(settings.namespace),
        lambda r: turn_id.encode() in r.value and b"speech.delivered" in r.value,
    )
    delivered = decode(record.value)
    assert isinstance(delivered, SpeechDelivered) and delivered.reason == "interrupted"
    assert submitted.submitted_at_ms < delivered.first_audio_at_ms < delivered.ended_at_ms
    assert delivered.audio_ms > 0 and delivered.edge_id == submitted.edge_id


async def test_a_short_stop_over_the_voice_interrupts_and_is_not_a_turn():
    """ "Stop." (espeak-ng, ~0.4 s: shorter than a barge-in) over the assistant's voice: the
    edge's command spotter (Whisper base) hears a command, the answer stops at once, and no
    turn is made of the word (with the spotter off it would be ignored as a backchannel)."""
    async with stack(token_interval_s=0.05) as (_, _engine, client):
        turn_id, events = await a_long_answer_speaking(client)

        # a microphone streams in real time (20 ms a message): the spotter's verdict comes
        # while the silence after the word goes on
        command = pcm16(np.concatenate([spoken("Stop."), quiet_room(1.0)]))
        chunk = 2 * SAMPLE_RATE // 50
        for at in range(0, len(command), chunk):
            await client.append_audio("mic", command[at : at + chunk])
            await asyncio.sleep(0.02)
        assert isinstance(await client.next_event(), InputSpeechStarted)
        events += [e async for e in client.events(turn_id, speech=True)]
        assert next(e for e in events if isinstance(e, ResponseAudioDone)).reason == "interrupted"
        assert next(e for e in events if isinstance(e, ResponseDone)).finish_reason == (
            FinishReason.CANCELLED
        )
        assert any(isinstance(e, ResponseTruncated) for e in events)
        stopped = await client.next_event()
        assert isinstance(stopped, InputSpeechStopped) and stopped.ignored == "command"
        assert stopped.turn_id is None
        # nothing else comes: the word did not become a turn
        with pytest.raises(asyncio.TimeoutError):
            await client.next_event(wait_s=2.0)


async def test_speech_never_says_what_hold_back_cut():
    secret = "sk-proj-" + "A1b2C3d4" * 5  # an API key: the output rules cut it
    question = "Hello there my friend, please keep " + secret + " " + LONG_QUESTION
    # The output rules are under test; the category classifier would stop the pasted key at
    # the input already (it reads it as private data), so it is off here.
    async with stack(policy="hold_back", safety_categories=False) as (_, _, client):
        turn_id = await client.start_turn(conv(), question, speech=SpeechOptions("espeak"))
        events = await collect(client, turn_id)
    done = next(e for e in events if isinstance(e, ResponseDone))
    assert done.error is not None and done.error.code == "output_cut"
    spoken = "".join(e.text for e in events if isinstance(e, ResponseAudio))
    assert "sk-proj" not in spoken and "A1b2" not in spoken
    assert next(e for e in events if isinstance(e, ResponseAudioDone)).reason == "safety"


async def test_a_pause_mid_sentence_withdraws_the_guess_and_the_whole_sentence_is_answered():
    """The voice loop answers after 200 ms of silence on a guess; a 350 ms pause inside the
    question proves the guess wrong: it is withdrawn (never shown, kept out of the history)
    and the whole question is answered once."""
    async with stack() as (running, _, client):
        conversation = conv()
        await client.update_session(
            speech=SpeechOptions("espeak"),
            turn_detection=TurnDetection(conversation_id=conversation, stream_id="mic"),
        )
        utterance = np.concatenate(
            [
                quiet_room(0.5),
                spoken("What is the capital", trim=True),
                quiet_room(0.35),
                spoken("of France?", trim=True),
                quiet_room(1.0),
            ]
        )
        await client.append_audio("mic", pcm16(utterance))
        assert isinstance(await client.next_event(), InputSpeechStarted)
        accepted = await client.next_event()  # one turn only: the guess was never shown
        assert isinstance(accepted, TurnAccepted)
        events = await collect(client, accepted.turn_id)
        transcript = next(e for e in events if isinstance(e, InputTranscript))
        assert {"capital", "france"} <= set(words(transcript.text))
        follow_up = await client.start_turn(conversation, "And of Italy?")
        async for _ in client.events(follow_up):
            pass
        prompt = await assembled_prompt(running.settings, follow_up)
    questions = [m.content for m in prompt.messages if m.role == Role.USER]
    assert len(questions) == 2 and {"capital", "france"} <= set(words(questions[0]))


async def test_semantic_vad_with_the_text_model_keeps_listening_where_no_word_list_can():
    """ "Could you explain why the sky is" ends on a word the lists leave alone (a verb that
    also ends sentences) and sounds finished to the turn model; the text model (SmolLM2, its
    verdict sent after the guess's answer started) reads it as unfinished, so the 0.8 s pause
    does not end the turn (eagerness high: only 1 s of silence would) and the whole question
    is the one turn answered. Without the text model the turn ends on the half (checked)."""
    async with stack(sentence_end_model=True) as (running, _, client):
        judge = running.preprocess.service.sentence_end if running.preprocess else None
        assert judge is not None
        await asyncio.to_thread(judge.load)  # as after a first guess (it loads on one)
        await client.update_session(
            turn_detection=TurnDetection(
                conversation_id=conv(), stream_id="mic", type="semantic_vad", eagerness="high"
            ),
        )
        await say_with_a_pause(client, "Could you explain why the sky is", 0.8, "blue.")
        assert isinstance(await client.next_event(), InputSpeechStarted)
        accepted = await client.next_event()
        assert isinstance(accepted, TurnAccepted)
        events = [e async for e in client.events(accepted.turn_id)]
    transcript = next(e for e in events if isinstance(e, InputTranscript))
    assert {"why", "blue"} <= set(words(transcript.text))  # the whole question


async def test_semantic_vad_does_not_end_a_turn_on_words_the_asr_could_not_read():
    """A Spanish speaker on this English-only deployment (tiny.en): "¿Cuántos gramos de
    azúcar tiene una" … 1.5 s … "lata de refresco?". The half sounds finished to the turn
    model and tiny.en makes a whole English sentence of it ("I'm going to see you next
    time.", its tokens' mean log-probability ~ -1.5), which arrives ~0.8 s into the pause:
    words that unsure are not trusted, so the pause is an unfinished one (eagerness medium:
    2 s of silence end it) and the whole is the one turn. Trusting them, the turn ends on
    the half (checked)."""
    spanish = EspeakSpeaker("es")
    first = "¿Cuántos gramos de azúcar tiene una"
    async with stack() as (running, _, client):
        assert running.preprocess is not None
        await asyncio.to_thread(running.preprocess.service.speech.warm)  # as a worker starts
        warm_up = await client.start_turn(conv(), "Hello.")  # every hop's consumers joined
        assert [e async for e in client.events(warm_up)]
        await client.update_session(
            turn_detection=TurnDetection(
                conversation_id=conv(), stream_id="mic", type="semantic_vad", eagerness="medium"
            ),
        )
        await say_with_a_pause(client, first, 1.5, "lata de refresco?", voice=spanish)
        await in_real_time(client, pcm16(quiet_room(1.0)))  # the unfinished pause's 2 s
        assert isinstance(await client.next_event(), InputSpeechStarted)
        accepted = await client.next_event()
        assert isinstance(accepted, TurnAccepted)
        events = [e async for e in client.events(accepted.turn_id)]
    transcript = next(e for e in events if isinstance(e, InputTranscript))
    half_s = len(voiced(spanish, first, trim=True)) / SAMPLE_RATE
    assert transcript.audio_s > half_s + 1.5, transcript  # the pause and the rest are in it


async def test_the_rest_of_a_sentence_after_an_early_end_of_turn_stops_the_answer_and_is_asked():
    """The silence rule ends the turn in a 0.9 s pause mid-sentence; "blue?" comes before the
    answer was heard for a second: the answer stops (nothing or its first words heard), and
    the short rest is the next turn, whose prompt holds both halves (it was dropped as a
    backchannel before protocol 1.18)."""
    async with stack(token_interval_s=0.15) as (running, _, client):  # still answering
        conversation = conv()
        await client.update_session(
            speech=SpeechOptions("espeak"),
            turn_detection=TurnDetection(conversation_id=conversation, stream_id="mic"),
        )
        await say_with_a_pause(client, "Could you explain why the sky is", 0.9, "blue?")
        assert isinstance(await client.next_event(), InputSpeechStarted)
        first = await client.next_event()
        assert isinstance(first, TurnAccepted)
        events = [e async for e in client.events(first.turn_id, speech=True)]
        assert next(e for e in events if isinstance(e, ResponseAudioDone)).reason == "interrupted"
        assert any(isinstance(e, ResponseTruncated) for e in events)
        assert isinstance(await client.next_event(), InputSpeechStarted)  # "blue?"
        second = await client.next_event()
        assert isinstance(second, TurnAccepted)
        rest_events = [e async for e in client.events(second.turn_id, speech=True)]
        transcript = next(e for e in rest_events if isinstance(e, InputTranscript))
        assert "blue" in words(transcript.text)
        prompt = await assembled_prompt(running.settings, second.turn_id)
    questions = [m.content for m in prompt.messages if m.role == Role.USER]
    assert len(questions) == 2 and "why" in words(questions[0]) and "blue" in words(questions[1])


async def test_with_no_tts_worker_the_text_is_whole_and_speech_ends_with_a_clear_error():
    async with stack(with_tts=False, speech_deadline_s=1.0) as (_, _, client):
        turn_id = await client.start_turn(conv(), "Hello there.", speech=SpeechOptions("joe"))
        events = await collect(client, turn_id)
    done = next(e for e in events if isinstance(e, ResponseDone))
    assert done.finish_reason == FinishReason.STOP and done.text.startswith("You said: Hello")
    assert not any(isinstance(e, ResponseAudio) for e in events)
    ended = events[-1]
    assert isinstance(ended, ResponseAudioDone) and ended.reason == "tts_unavailable"
    assert ended.error is not None and ended.error.retryable


async def test_semantic_vad_ends_a_finished_question_on_the_turn_models_verdict():
    """With the real Silero, Smart Turn and Whisper. Eagerness high waits 1 s of silence
    when the model says "not yet"; the question is followed by only 0.8 s of silence, so
    the turn can only have ended by the model's verdict (the silence rule is not used)."""
    async with stack() as (_, _, client):
        await client.update_session(
            turn_detection=TurnDetection(
                conversation_id=conv(), stream_id="mic", type="semantic_vad", eagerness="high"
            ),
        )
        speech = np.concatenate([quiet_room(0.5), spoken("What is the capital of France?")])
        await client.append_audio("mic", pcm16(speech))
        await in_real_time(client, pcm16(quiet_room(0.8)))
        assert isinstance(await client.next_event(), InputSpeechStarted)
        accepted = await client.next_event()
        assert isinstance(accepted, TurnAccepted)
        events = [e async for e in client.events(accepted.turn_id)]
    stopped = events[0]
    assert isinstance(stopped, InputSpeechStopped) and stopped.turn_id == accepted.turn_id
    transcript = next(e for e in events if isinstance(e, InputTranscript))
    assert {"capital", "france"} <= set(words(transcript.text))
    assert isinstance(events[-1], ResponseDone) and events[-1].finish_reason == FinishReason.STOP


async def test_interim_transcripts_show_the_words_while_the_user_is_still_speaking():
    """With the real Silero and Whisper (tiny.en at the edge, as the deployment's): a ~4 s
    question streamed in real time gets interim transcripts before its speech stops, each
    reaching further into the stream, whose words are the question's."""
    question = "Could you tell me about the tallest mountains in the world and how high they are?"
    async with stack() as (_, _, client):
        await client.update_session(
            turn_detection=TurnDetection(
                conversation_id=conv(), stream_id="mic", interim_transcripts=True
            ),
        )
        speech = np.concatenate([quiet_room(0.5), spoken(question), quiet_room(1.0)])
        talking = asyncio.create_task(in_real_time(client, pcm16(speech)))
        interims: list[InputTranscriptInterim] = []
        while not isinstance(event := await client.next_event(), TurnAccepted):
            if isinstance(event, InputTranscriptInterim):
                assert not talking.done() or interims, "an interim came only after the speech"
                interims.append(event)
        await talking
        events = await collect_text(client, event.turn_id)
    stopped = events[0]
    assert isinstance(stopped, InputSpeechStopped)
    assert len(interims) >= 2, interims
    ends = [i.audio_end_ms for i in interims]
    assert ends == sorted(ends) and ends[-1] <= stopped.audio_end_ms
    assert {i.language for i in interims} == {"en"}
    transcript = next(e for e in events if isinstance(e, InputTranscript))
    final = set(words(transcript.text))
    heard = [w for i in interims for w in words(i.text)]
    assert {"tell", "mountains"} & set(heard), interims  # words of the question, early
    assert len([w for w in heard if w in final]) >= 0.7 * len(heard), (interims, transcript)


async def collect_text(client: EdgeClient, turn_id: str) -> list:
    return [e async for e in client.events(turn_id)]

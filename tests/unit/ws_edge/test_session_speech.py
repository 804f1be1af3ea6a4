"""Spoken answers at the edge: speech settings, audio relay, interrupts and truncations,
and the voice loop (utterances become turns, barge-in, backchannels). Pure session, fake
clock."""

from __future__ import annotations

from base64 import b64encode

import pytest

from harness.factories import completed
from runtime.blobs import sha256_hex
from schemas.events import (
    ErrorInfo,
    FinishReason,
    InputTranscribed,
    MediaKind,
    MediaRef,
    SentenceEndJudged,
    SpeechAudio,
    SpeechDelivered,
    SpeechSettings,
    TokenChunk,
    ToolCall,
    ToolSpec,
    Truncation,
    TurnStarted,
    TurnTruncated,
)
from schemas.tools import AllowList, call_id
from tests.unit.ws_edge.test_session import SECRET, frame, only_error
from ws_edge.actions import (
    CheckCommand,
    CheckTurn,
    ConfirmTurn,
    DetectSpeech,
    DropAudio,
    PublishTruncation,
    RecordSpeech,
    RequestCancel,
    Send,
    SubmitTurn,
    TranscribeSoFar,
)
from ws_edge.auth import mint_token
from ws_edge.errors import BrokerUnavailable
from ws_edge.media import Upload
from ws_edge.messages import (
    ErrorEvent,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscript,
    InputTranscriptInterim,
    ResponseAudio,
    ResponseAudioDone,
    ResponseDelta,
    ResponseDone,
    ResponseStarted,
    ResponseTruncated,
    SessionUpdated,
    SpeechOptions,
    TurnAccepted,
    TurnDetection,
)
from ws_edge.server_tools import ServerTools
from ws_edge.session import Session, SessionLimits
from ws_edge.voice.interim import Interim
from ws_edge.voice.loop import EAGERNESS, FRAME_BYTES, FRAME_MS, VadRules

VOICES = ["joe", "espeak"]
ANSWER = "Hello there, how are you?"
FIRST, SECOND = "Hello there, ", "how are you?"  # 1000 ms and 500 ms of audio


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(clock: Clock | None = None, **limits) -> tuple[Session, Clock]:
    clock = clock or Clock()
    session = Session(
        session_id="s1",
        edge_id="edge-1",
        auth_secret=SECRET,
        limits=SessionLimits(**limits),
        clock_ms=clock,
    )
    session.open(mint_token(SECRET, "alice", "acme"))
    return session, clock


def b64(data: bytes) -> str:
    return b64encode(data).decode()


def update(session: Session, **fields):
    return session.receive(frame(type="session.update", **fields))


def pcm_ms(ms: int) -> bytes:
    """`ms` of PCM16 at 16 kHz: 16 samples (32 bytes) a millisecond."""
    return b"\x01\x02" * (16 * ms)


def audio(
    turn_id: str,
    index: int,
    text: str,
    char_start: int,
    ms: int,
    *,
    final: bool = False,
    stopped: str = "",
    attempt: str = "a1",
) -> SpeechAudio:
    return SpeechAudio(
        turn_id=turn_id,
        attempt=attempt,
        index=index,
        text=text,
        char_start=char_start,
        sample_rate=16000,
        pcm=pcm_ms(ms),
        final=final,
        stopped=stopped,
    )


def spoken_turn(session: Session, conversation_id: str = "c1", text: str = "hi") -> str:
    """A turn with speech on, accepted and started (attempt a1)."""
    [submit] = session.receive(
        frame(type="turn.create", conversation_id=conversation_id, text=text, speech={})
    )
    assert isinstance(submit, SubmitTurn) and submit.turn.speech == SpeechSettings("joe")
    turn_id = submit.turn.turn_id
    session.submit_succeeded(turn_id)
    session.relay(TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt="a1"))
    return turn_id


def speak_all(session: Session, clock: Clock, turn_id: str, *, at: float = 5000.0) -> None:
    """Both pieces' audio (1500 ms in all) sent at `at`, then the text ends: the turn is
    still open (its final audio frame has not come)."""
    clock.now = at
    session.relay(audio(turn_id, 0, FIRST, 0, 1000))
    session.relay(audio(turn_id, 1, SECOND, len(FIRST), 500))
    session.relay(completed(turn_id, conversation_id="c1", text=ANSWER))


def played_turn(session: Session, clock: Clock, *, at: float = 5000.0) -> str:
    """A spoken turn whose text and audio were all sent (at `at`): closed, still playing."""
    turn_id = spoken_turn(session)
    speak_all(session, clock, turn_id, at=at)
    session.relay(audio(turn_id, 2, "", len(ANSWER), 0, final=True))
    assert session.open_turns == []
    return turn_id


def delivered(
    turn_id: str, first_audio_at_ms: float, *, audio_ms: float, reason: str = "completed", at=None
) -> RecordSpeech:
    """What the edge records when a spoken answer's audio ended (`at`: the clock then)."""
    return RecordSpeech(
        SpeechDelivered(
            turn_id=turn_id,
            conversation_id="c1",
            tenant_id="acme",
            user_id="alice",
            edge_id="edge-1",
            first_audio_at_ms=first_audio_at_ms,
            ended_at_ms=first_audio_at_ms if at is None else at,
            audio_ms=audio_ms,
            reason=reason,
        )
    )


def interrupt(session: Session, turn_id: str, **fields):
    return session.receive(frame(type="turn.interrupt", turn_id=turn_id, **fields))


def next_turn(session: Session, conversation_id: str = "c1") -> SubmitTurn:
    [submit] = session.receive(frame(type="turn.create", conversation_id=conversation_id, text="x"))
    assert isinstance(submit, SubmitTurn)
    session.submit_succeeded(submit.turn.turn_id)  # frees the conversation's publish lane
    return submit


def truncated(
    turn_id,
    text,
    audio_end_ms,
    *,
    reason,
    at,
    cancel=True,
    audio_done=True,
    first_audio=0.0,
    sent_ms=0.0,
):
    """The actions of an interrupt, in order (`first_audio`, `sent_ms`: when the answer's
    first audio went out and how much was sent, for the speech record)."""
    truncation = Truncation(turn_id, text, audio_end_ms)
    actions = [DropAudio(turn_id)]
    if cancel:
        actions.append(RequestCancel(turn_id, "c1", reason))
    if audio_done:
        actions.append(Send(ResponseAudioDone(turn_id, "interrupted")))
        actions.append(
            delivered(turn_id, first_audio, audio_ms=sent_ms, reason="interrupted", at=at)
        )
    actions.append(Send(ResponseTruncated(turn_id, audio_end_ms, text)))
    actions.append(
        PublishTruncation(
            TurnTruncated(
                turn_id=turn_id,
                conversation_id="c1",
                tenant_id="acme",
                user_id="alice",
                truncation=truncation,
                reason=reason,
                truncated_at_ms=at,
            )
        )
    )
    return actions


# ---- session.update ------------------------------------------------------------------------
def test_session_update_turns_speech_on_and_off():
    session, _ = make()
    assert update(session, speech={"voice": "joe"}) == [
        Send(SessionUpdated(SpeechOptions("joe"), None, VOICES))
    ]
    assert update(session, speech={"voice": " ESPEAK "}) == [
        Send(SessionUpdated(SpeechOptions("espeak"), None, VOICES))
    ]
    [submit] = session.receive(frame(type="turn.create", conversation_id="c1", text="a"))
    assert submit.turn.speech == SpeechSettings("espeak")
    assert update(session, speech=None) == [Send(SessionUpdated(None, None, VOICES))]
    [submit] = session.receive(frame(type="turn.create", conversation_id="c2", text="b"))
    assert submit.turn.speech is None


def test_session_update_with_no_fields_changes_nothing():
    session, _ = make()
    update(session, speech={"voice": "joe"})
    assert update(session) == [Send(SessionUpdated(SpeechOptions("joe"), None, VOICES))]


def test_unknown_voice_is_refused_with_its_own_code():
    session, _ = make()
    update(session, speech={"voice": "joe"})
    err = only_error(update(session, speech={"voice": "hal9000"}))
    assert err.code == "unknown_voice"
    assert "hal9000" in err.message and "joe, espeak" in err.message
    # the session's setting is unchanged
    assert update(session) == [Send(SessionUpdated(SpeechOptions("joe"), None, VOICES))]
    err = only_error(
        session.receive(
            frame(
                type="turn.create",
                conversation_id="c1",
                text="hi",
                client_turn_id="k1",
                speech={"voice": "nope"},
            )
        )
    )
    assert (err.code, err.client_turn_id) == ("unknown_voice", "k1")
    assert session.open_turns == []


def test_turn_speech_overrides_the_session_default():
    session, _ = make()
    update(session, speech={"voice": "joe"})
    [submit] = session.receive(
        frame(type="turn.create", conversation_id="c1", text="a", speech=None)
    )
    assert submit.turn.speech is None
    [submit] = session.receive(
        frame(type="turn.create", conversation_id="c2", text="b", speech={"voice": "espeak"})
    )
    assert submit.turn.speech == SpeechSettings("espeak")
    [submit] = session.receive(frame(type="turn.create", conversation_id="c3", text="c"))
    assert submit.turn.speech == SpeechSettings("joe")


# ---- audio relay ---------------------------------------------------------------------------
def test_speech_audio_is_relayed_as_response_audio():
    session, _ = make()
    turn_id = spoken_turn(session)
    piece = audio(turn_id, 0, FIRST, 0, 1000)
    assert session.relay(piece) == [
        Send(
            ResponseAudio(
                turn_id=turn_id,
                index=0,
                text=FIRST,
                char_start=0,
                sample_rate=16000,
                duration_ms=1000.0,
                audio=b64(pcm_ms(1000)),
            )
        )
    ]
    [sent] = session.relay(audio(turn_id, 1, SECOND, 13, 500))
    assert (sent.event.index, sent.event.char_start, sent.event.duration_ms) == (1, 13, 500.0)


def test_text_done_keeps_the_route_open_until_the_final_audio():
    session, _ = make()
    turn_id = spoken_turn(session)
    session.relay(audio(turn_id, 0, FIRST, 0, 1000))
    [done] = session.relay(completed(turn_id, conversation_id="c1", text=ANSWER))
    assert isinstance(done.event, ResponseDone) and done.event.text == ANSWER
    assert session.open_turns == [turn_id]
    assert session.awaits_audio(turn_id)
    actions = session.relay(audio(turn_id, 1, SECOND, 13, 500, final=True))
    assert [type(a.event) for a in actions] == [ResponseAudio, ResponseAudioDone, SpeechDelivered]
    assert actions[1] == Send(ResponseAudioDone(turn_id, "completed"))
    assert actions[2] == delivered(turn_id, 1000.0, audio_ms=1500.0)
    assert session.open_turns == []
    assert not session.awaits_audio(turn_id)
    assert session.relay(audio(turn_id, 2, "late", 25, 100)) == []


def test_empty_final_audio_sends_only_audio_done():
    session, _ = make()
    turn_id = spoken_turn(session)
    session.relay(completed(turn_id, conversation_id="c1", text=ANSWER))
    final = audio(turn_id, 0, "", 0, 0, final=True)
    assert session.relay(final) == [
        Send(ResponseAudioDone(turn_id, "completed")),
        delivered(turn_id, 0.0, audio_ms=0.0, at=1000.0),  # none went out
    ]


def test_audio_done_before_text_done_closes_at_response_done():
    session, _ = make()
    turn_id = spoken_turn(session)
    session.relay(audio(turn_id, 0, "", 0, 0, final=True, stopped="output_cut"))
    assert session.open_turns == [turn_id]
    assert not session.awaits_audio(turn_id)  # text not done yet
    session.relay(completed(turn_id, conversation_id="c1", text=ANSWER))
    assert session.open_turns == []


def test_stopped_final_frame_names_the_reason():
    session, _ = make()
    turn_id = spoken_turn(session)
    actions = session.relay(audio(turn_id, 0, "", 0, 0, final=True, stopped="cancelled"))
    assert actions == [
        Send(ResponseAudioDone(turn_id, "cancelled")),
        delivered(turn_id, 0.0, audio_ms=0.0, reason="cancelled", at=1000.0),
    ]


def test_audio_of_a_failed_over_attempt_is_dropped():
    session, _ = make()
    turn_id = spoken_turn(session)
    assert session.relay(audio(turn_id, 0, FIRST, 0, 100, attempt="old")) == []


def test_text_only_turns_close_at_response_done():
    session, _ = make()
    [submit] = session.receive(frame(type="turn.create", conversation_id="c1", text="hi"))
    turn_id = submit.turn.turn_id
    assert submit.turn.speech is None
    session.submit_succeeded(turn_id)
    session.relay(completed(turn_id, conversation_id="c1"))
    assert session.open_turns == []
    assert session.speech_timed_out(turn_id) == []


def test_speech_timed_out_ends_the_audio_with_tts_unavailable():
    session, _ = make()
    turn_id = spoken_turn(session)
    session.relay(completed(turn_id, conversation_id="c1", text=ANSWER))
    error = ErrorInfo("tts_unavailable", "speech did not arrive in time", retryable=True)
    assert session.speech_timed_out(turn_id) == [
        Send(ResponseAudioDone(turn_id, "tts_unavailable", error)),
        delivered(turn_id, 0.0, audio_ms=0.0, reason="tts_unavailable", at=1000.0),
    ]
    assert session.open_turns == []
    assert session.speech_timed_out(turn_id) == []


# ---- turn.interrupt ------------------------------------------------------------------------
def test_interrupt_with_audio_end_ms_truncates_to_the_words_heard():
    session, clock = make()
    turn_id = spoken_turn(session)
    clock.now = 5000.0
    session.relay(audio(turn_id, 0, FIRST, 0, 1000))
    session.relay(audio(turn_id, 1, SECOND, 13, 500))
    clock.now = 5100.0
    actions = interrupt(session, turn_id, audio_end_ms=700)
    # 700 of 1000 ms into "Hello there, ": "the|re" was cut in half
    assert actions == truncated(
        turn_id, "Hello ", 700.0, reason="interrupt", at=5100.0, first_audio=5000.0, sent_ms=1500.0
    )
    assert interrupt(session, turn_id) == []  # once
    # what the engine still makes is not shown, and its audio is not relayed
    assert session.relay(TokenChunk(turn_id=turn_id, seq=0, text="x", emitted_at_ms=1)) == []
    assert session.relay(audio(turn_id, 2, "more", 25, 100)) == []
    assert session.relay(audio(turn_id, 3, "", 29, 0, final=True)) == []
    [done] = session.relay(completed(turn_id, conversation_id="c1", text=ANSWER))
    assert isinstance(done.event, ResponseDone)
    assert session.open_turns == []
    assert only_error(interrupt(session, turn_id)).code == "unknown_turn"  # not kept to play


def test_the_next_turn_of_the_conversation_carries_the_truncation():
    session, clock = make()
    turn_id = spoken_turn(session)
    clock.now = 5000.0
    session.relay(audio(turn_id, 0, FIRST, 0, 1000))
    interrupt(session, turn_id, audio_end_ms=1000)
    assert next_turn(session, "other").turn.truncates == []
    assert next_turn(session, "c1").turn.truncates == [Truncation(turn_id, FIRST, 1000.0)]
    assert next_turn(session, "c1").turn.truncates == []  # carried once


def test_interrupt_without_audio_end_ms_estimates_from_the_clock():
    session, clock = make()
    turn_id = spoken_turn(session)
    clock.now = 5000.0  # the first audio frame leaves
    session.relay(audio(turn_id, 0, FIRST, 0, 1000))
    clock.now = 5600.0
    session.relay(audio(turn_id, 1, SECOND, 13, 500))
    clock.now = 6250.0  # 1250 ms since the first audio: 250 ms into "how are you?"
    actions = interrupt(session, turn_id)
    assert actions == truncated(
        turn_id,
        "Hello there, how ",
        1250.0,
        reason="interrupt",
        at=6250.0,
        first_audio=5000.0,
        sent_ms=1500.0,
    )


def test_estimate_never_passes_the_audio_sent():
    session, clock = make()
    turn_id = spoken_turn(session)
    clock.now = 5000.0
    session.relay(audio(turn_id, 0, FIRST, 0, 1000))
    clock.now = 9000.0
    [*_, sent, _publish] = interrupt(session, turn_id)
    assert sent == Send(ResponseTruncated(turn_id, 1000.0, FIRST))


def test_client_audio_end_ms_past_the_audio_is_clamped():
    session, clock = make()
    turn_id = spoken_turn(session)
    clock.now = 5000.0
    session.relay(audio(turn_id, 0, FIRST, 0, 1000))
    [*_, sent, _publish] = interrupt(session, turn_id, audio_end_ms=60_000)
    assert sent == Send(ResponseTruncated(turn_id, 1000.0, FIRST))


def test_interrupt_before_any_audio_keeps_nothing():
    session, clock = make()
    turn_id = spoken_turn(session)
    clock.now = 7000.0
    actions = interrupt(session, turn_id)
    assert actions == truncated(turn_id, "", 0.0, reason="interrupt", at=7000.0)
    assert next_turn(session).turn.truncates == [Truncation(turn_id, "", 0.0)]


def test_interrupt_after_text_done_still_cancels_speech():
    session, clock = make()
    turn_id = spoken_turn(session)
    speak_all(session, clock, turn_id, at=5000.0)  # text done, final audio not yet
    clock.now = 5500.0
    actions = interrupt(session, turn_id)
    assert actions == truncated(
        turn_id, "Hello ", 500.0, reason="interrupt", at=5500.0, first_audio=5000.0, sent_ms=1500.0
    )
    assert session.open_turns == []  # its text was done: closed now


def test_interrupt_of_a_text_only_turn_cancels_without_truncation():
    session, _ = make()
    [submit] = session.receive(frame(type="turn.create", conversation_id="c1", text="hi"))
    turn_id = submit.turn.turn_id
    session.submit_succeeded(turn_id)
    assert interrupt(session, turn_id) == [
        DropAudio(turn_id),
        RequestCancel(turn_id, "c1", "interrupt"),
    ]
    assert next_turn(session).turn.truncates == []


def test_interrupt_of_an_unknown_turn_is_an_error():
    session, _ = make()
    err = only_error(interrupt(session, "nope"))
    assert err.code == "unknown_turn"


def test_played_turn_can_be_interrupted_while_its_audio_still_plays():
    session, clock = make()
    turn_id = played_turn(session, clock, at=5000.0)
    clock.now = 6000.0  # 1000 of 1500 ms played
    actions = interrupt(session, turn_id)
    # generation and speech were over: nothing to cancel, no audio.done to send
    assert actions == truncated(
        turn_id, FIRST, 1000.0, reason="interrupt", at=6000.0, cancel=False, audio_done=False
    )
    assert only_error(interrupt(session, turn_id)).code == "unknown_turn"  # once


def test_played_turn_cannot_be_interrupted_after_it_finished_playing():
    # regression: the InterruptTurn branch once found the turn in `_played` without checking
    # by the clock that its audio was still playing, and "truncated" it to the whole answer
    session, clock = make()
    turn_id = played_turn(session, clock, at=5000.0)
    clock.now = 6600.0  # 1600 ms since the first audio: all 1500 ms played
    err = only_error(interrupt(session, turn_id))
    assert err.code == "unknown_turn"


# ---- the voice loop ------------------------------------------------------------------------
DETECTION = {"conversation_id": "c1", "stream_id": "mic"}
NO_GUESS = VadRules(early_silence_ms=0)  # end-pointing by the silence rule alone
# talk over the assistant's voice from its first audio on (no grace): the over-voice rules
HEARD_AT_ONCE = VadRules(barge_in_grace_ms=0)
NO_GUESS_HEARD_AT_ONCE = VadRules(early_silence_ms=0, barge_in_grace_ms=0)


def numbered(first: int, count: int) -> bytes:
    return b"".join(bytes([n % 251]) * FRAME_BYTES for n in range(first, first + count))


class Mic:
    """Talks into a session's detected stream: audio.append, then the VAD's scores."""

    def __init__(self, session: Session, stream_id: str = "mic") -> None:
        self.session = session
        self.stream_id = stream_id
        self.n = 0

    def say(self, probs: list[float]):
        pcm = numbered(self.n, len(probs))
        self.n += len(probs)
        [detect] = self.session.receive(
            frame(type="audio.append", stream_id=self.stream_id, data=b64(pcm))
        )
        assert detect == DetectSpeech(self.stream_id, pcm)
        return self.session.voice_activity(self.stream_id, detect.frames, probs)


def listening(clock: Clock | None = None, speech: bool = False, **limits):
    session, clock = make(clock, **limits)
    if speech:
        update(session, speech={"voice": "joe"})
    actions = update(session, turn_detection=DETECTION)
    speech_options = SpeechOptions("joe") if speech else None
    assert actions == [Send(SessionUpdated(speech_options, TurnDetection("c1", "mic"), VOICES))]
    return session, clock, Mic(session)


def test_audio_append_on_the_detected_stream_asks_for_whole_frames():
    session, _, _ = listening()
    half = b"\x05" * (FRAME_BYTES // 2)

    def append(data: bytes):
        return session.receive(frame(type="audio.append", stream_id="mic", data=b64(data)))

    assert append(half) == []
    assert append(half + b"\x06" * 100) == [DetectSpeech("mic", half + half)]
    rest = b"\x07" * (FRAME_BYTES - 100)
    assert append(rest) == [DetectSpeech("mic", b"\x06" * 100 + rest)]
    err = only_error(append(b"1"))
    assert err.code == "invalid_message"


def test_an_utterance_becomes_a_turn_with_its_audio():
    session, _, mic = listening(vad=NO_GUESS)
    assert mic.say([0.0] * 6) == []
    assert mic.say([0.9] * 8) == [Send(InputSpeechStarted("mic", 192.0))]
    assert mic.say([0.9] * 2 + [0.0] * 15) == []
    [stopped, submit] = mic.say([0.0])
    assert isinstance(submit, SubmitTurn)
    turn_id = submit.turn.turn_id
    assert stopped == Send(InputSpeechStopped("mic", 512.0, turn_id=turn_id))
    utterance = numbered(0, 6 + 10 + 16)  # pad, speech, the silence that ended it
    assert submit.turn.conversation_id == "c1" and submit.turn.text == ""
    assert submit.turn.media == [
        MediaRef(
            kind=MediaKind.AUDIO,
            sha256=sha256_hex(utterance),
            size_bytes=len(utterance),
            format="pcm16",
            sample_rate=16000,
        )
    ]
    assert submit.uploads == (Upload(sha256_hex(utterance), utterance),)
    assert submit.turn.speech is None
    assert session.open_turns == [turn_id]
    [accepted] = session.submit_succeeded(turn_id)
    assert accepted == Send(TurnAccepted(turn_id, "c1"))


def test_an_utterance_turn_carries_when_its_speech_ended_on_the_clock():
    """Not when the silence rule decided (512 ms of silence later): the end-of-turn wait is
    measured from what the user did."""
    session, clock, mic = listening(vad=NO_GUESS)
    clock.now = 10_000.0

    def say(probs: list[float]):  # a microphone streams in real time
        clock.now += len(probs) * FRAME_MS
        return mic.say(probs)

    say([0.0] * 6)
    say([0.9] * 10)  # speech ends 16 frames (512 ms) into the stream
    say([0.0] * 15)
    [_, submit] = say([0.0])
    assert submit.turn.speech_ended_at_ms == 10_512.0
    assert submit.turn.submitted_at_ms == 10_000.0 + 32 * FRAME_MS
    assert next_turn(session, "typed").turn.speech_ended_at_ms == 0.0  # typed: not known


def test_a_guess_carries_the_end_of_speech_of_its_pause():
    _, clock, mic = listening()
    clock.now = 20_000.0
    submit = guessed(mic)  # all 23 frames arrive at once, at 20_000 on the clock
    assert submit.turn.speculative
    assert submit.turn.speech_ended_at_ms == 20_000.0 - (23 - 16) * FRAME_MS


def test_a_click_on_the_mic_is_not_a_turn():
    _, _, mic = listening()
    assert mic.say([0.0] * 6 + [0.9] * 3 + [0.0] * 40) == []


def test_voice_activity_for_another_stream_or_after_detection_off_is_ignored():
    session, _, _ = listening()
    pcm = numbered(0, 20)
    assert session.voice_activity("other", pcm, [0.9] * 20) == []
    assert update(session, turn_detection=None) == [Send(SessionUpdated(None, None, VOICES))]
    assert session.voice_activity("mic", pcm, [0.9] * 20) == []
    # the stream is a plain buffer again
    assert session.receive(frame(type="audio.append", stream_id="mic", data=b64(pcm))) == []


def speaking_turn(session: Session, clock: Clock, *, at: float = 5000.0) -> str:
    """A spoken turn of conversation c1 whose first piece (1000 ms) was sent at `at`."""
    turn_id = spoken_turn(session)
    clock.now = at
    session.relay(audio(turn_id, 0, FIRST, 0, 1000))
    return turn_id


def test_speech_over_the_assistant_barges_in():
    session, clock, mic = listening(speech=True, vad=NO_GUESS_HEARD_AT_ONCE)
    turn_id = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0  # 400 ms of the answer played: "Hello" heard, "there" not
    assert mic.say([0.9] * 18) == [Send(InputSpeechStarted("mic", 0.0))]
    actions = mic.say([0.9])  # 608 ms of speech
    assert actions == truncated(
        turn_id, "Hello", 400.0, reason="barge_in", at=5400.0, first_audio=5000.0, sent_ms=1000.0
    )
    assert mic.say([0.9] * 20) == []  # one barge-in
    [stopped, submit] = mic.say([0.0] * 16)
    new_id = submit.turn.turn_id
    assert stopped == Send(InputSpeechStopped("mic", 39 * 32.0, turn_id=new_id))
    assert submit.turn.truncates == [Truncation(turn_id, "Hello", 400.0)]
    assert submit.turn.speech == SpeechSettings("joe")
    # the interrupted answer's remaining frames are dropped
    assert session.relay(audio(turn_id, 1, SECOND, 13, 500)) == []


def test_a_backchannel_over_the_assistant_is_ignored():
    session, clock, mic = listening(speech=True, vad=HEARD_AT_ONCE)
    turn_id = speaking_turn(session, clock)
    events = mic.say([0.9] * 12 + [0.0] * 16)
    assert events == [
        Send(InputSpeechStarted("mic", 0.0)),
        CheckCommand("mic", 1, numbered(0, 15), ""),  # unanswered: the duration rule stands
        Send(InputSpeechStopped("mic", 12 * 32.0, ignored="backchannel")),
    ]
    assert session.open_turns == [turn_id]  # not interrupted, no new turn
    [sent] = session.relay(audio(turn_id, 1, SECOND, 13, 500))
    assert isinstance(sent.event, ResponseAudio)
    assert next_turn(session).turn.truncates == []


def test_a_short_command_over_the_assistant_interrupts_and_is_not_a_turn():
    session, clock, mic = listening(speech=True, vad=HEARD_AT_ONCE)
    turn_id = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0  # 400 ms of the answer played: "Hello" heard, "there" not
    [started, check] = mic.say([0.9] * 12 + [0.0] * 3)  # "stop" (384 ms), 96 ms of silence
    assert started == Send(InputSpeechStarted("mic", 0.0))
    assert check == CheckCommand("mic", 1, numbered(0, 15), "")
    actions = session.command_verdict("mic", check.check_id, True)
    assert DropAudio(turn_id) in actions
    assert RequestCancel(turn_id, "c1", "barge_in") in actions
    assert Send(ResponseAudioDone(turn_id, "interrupted")) in actions
    assert Send(ResponseTruncated(turn_id, 400.0, "Hello")) in actions
    # the user says nothing more: the command ends, no turn is made of it
    assert mic.say([0.0] * 13) == [Send(InputSpeechStopped("mic", 12 * 32.0, ignored="command"))]
    assert next_turn(session).turn.truncates == [Truncation(turn_id, "Hello", 400.0)]


def test_not_a_command_or_a_verdict_for_a_closed_loop_changes_nothing():
    session, clock, mic = listening(speech=True, vad=HEARD_AT_ONCE)
    turn_id = speaking_turn(session, clock)
    [_, check] = mic.say([0.9] * 12 + [0.0] * 3)
    assert session.command_verdict("mic", check.check_id, False) == []
    assert session.command_verdict("other-stream", check.check_id, True) == []
    assert session.open_turns == [turn_id]
    assert mic.say([0.0] * 13) == [
        Send(InputSpeechStopped("mic", 12 * 32.0, ignored="backchannel"))
    ]


def test_speech_before_a_word_of_the_answer_is_heard_stops_it_and_is_the_next_turn():
    """The turn ended too soon ("Could you explain why the sky is" … "blue?"): the user goes
    on before the answer's first audio. The answer stops at once, nothing of it heard, and
    the short rest is a turn of its own, not a backchannel dropped over the voice."""
    session, clock, mic = listening(speech=True, vad=NO_GUESS)
    turn_id = spoken_turn(session)  # accepted and generating, no audio out yet
    clock.now = 5000.0
    [started, *stopped] = mic.say([0.9] * 8)  # 256 ms: speech
    assert started == Send(InputSpeechStarted("mic", 0.0))
    assert stopped == truncated(turn_id, "", 0.0, reason="barge_in", at=5000.0)
    # "blue?" (384 ms): short enough to be a "stop", so the spotter is asked first
    [check] = mic.say([0.9] * 4 + [0.0] * 3)
    assert check == CheckCommand("mic", 1, numbered(0, 15), "")
    assert session.command_verdict("mic", check.check_id, False) == []  # not a command
    [ended, submit] = mic.say([0.0] * 13)
    assert isinstance(submit, SubmitTurn)  # a turn, not a backchannel dropped over the voice
    assert ended == Send(InputSpeechStopped("mic", 12 * 32.0, turn_id=submit.turn.turn_id))
    assert submit.turn.truncates == [Truncation(turn_id, "", 0.0)]
    # its frames still on their way go nowhere
    assert session.relay(audio(turn_id, 0, FIRST, 0, 1000)) == []


def test_speech_in_the_first_second_of_the_answer_stops_it_keeping_what_was_heard():
    """The user goes on as the answer begins (its first 400 ms played): the answer stops when
    the speech counts, not after 600 ms of it, and the history keeps the heard "Hello"."""
    session, clock, mic = listening(speech=True, vad=NO_GUESS)
    turn_id = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0
    [started, *stopped] = mic.say([0.9] * 8)
    assert started == Send(InputSpeechStarted("mic", 0.0))
    assert stopped == truncated(
        turn_id, "Hello", 400.0, reason="barge_in", at=5400.0, first_audio=5000.0, sent_ms=1000.0
    )
    [check] = mic.say([0.9] * 4 + [0.0] * 3)
    assert session.command_verdict("mic", check.check_id, None) == []  # no verdict: a turn
    [_, submit] = mic.say([0.0] * 13)
    assert submit.turn.truncates == [Truncation(turn_id, "Hello", 400.0)]


def test_a_stop_as_the_answer_begins_stops_it_and_is_not_a_turn():
    session, clock, mic = listening(speech=True)
    turn_id = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0
    [_, *stopped] = mic.say([0.9] * 8)  # the answer stops as the speech counts
    assert Send(ResponseTruncated(turn_id, 400.0, "Hello")) in stopped
    [check] = mic.say([0.9] * 4 + [0.0] * 3)  # "stop" (384 ms), 96 ms of silence
    assert session.command_verdict("mic", check.check_id, True) == []  # stopped already
    # no guess was started on it, and it ends as a command: no answer to "stop"
    assert mic.say([0.0] * 13) == [Send(InputSpeechStopped("mic", 12 * 32.0, ignored="command"))]
    assert next_turn(session).turn.truncates == [Truncation(turn_id, "Hello", 400.0)]


def test_speech_once_the_answer_was_heard_for_the_grace_keeps_the_backchannel_rule():
    session, clock, mic = listening(speech=True, vad=NO_GUESS)
    turn_id = speaking_turn(session, clock, at=5000.0)
    clock.now = 6100.0  # heard for 1.1 s: past the 1 s grace
    assert mic.say([0.9] * 8) == [Send(InputSpeechStarted("mic", 0.0))]  # not stopped
    assert session.open_turns == [turn_id]
    ignored = mic.say([0.9] * 4 + [0.0] * 16)
    assert ignored[-1] == Send(InputSpeechStopped("mic", 12 * 32.0, ignored="backchannel"))


def test_speech_while_the_assistant_is_silent_never_barges_in():
    session, clock, mic = listening(speech=True, vad=NO_GUESS)
    played_turn(session, clock, at=5000.0)
    clock.now = 6600.0  # its 1500 ms of audio finished playing
    events = mic.say([0.9] * 40 + [0.0] * 16)
    assert [type(a) for a in events] == [Send, Send, SubmitTurn]
    assert [type(a.event) for a in events[:2]] == [InputSpeechStarted, InputSpeechStopped]
    assert events[2].turn.truncates == []


def test_barge_in_cuts_an_answer_still_playing_after_its_last_frame():
    session, clock, mic = listening(speech=True)
    turn_id = played_turn(session, clock, at=5000.0)
    clock.now = 6200.0  # 1200 of 1500 ms played
    mic.say([0.9] * 18)
    actions = mic.say([0.9])
    assert actions == truncated(
        turn_id,
        "Hello there, how ",
        1200.0,
        reason="barge_in",
        at=6200.0,
        cancel=False,
        audio_done=False,
    )


def test_text_deltas_still_stream_for_a_spoken_turn():
    session, _ = make()
    turn_id = spoken_turn(session)
    [delta] = session.relay(
        TokenChunk(turn_id=turn_id, seq=0, text="Hel", emitted_at_ms=1, attempt="a1")
    )
    assert delta == Send(ResponseDelta(turn_id, 0, "Hel"))
    restarted = session.relay(TurnStarted(turn_id=turn_id, worker_id="w2", model="m", attempt="a2"))
    assert isinstance(restarted[-1].event, ResponseStarted)


def test_a_refused_utterance_turn_does_not_swallow_the_barge_in_of_the_same_batch():
    # regression: the events of one batch were once answered in one `_answering_errors`
    # step, so an utterance turn refused (too_many_turns) dropped the actions of the
    # barge-in before it (RequestCancel, response.audio.done, PublishTruncation)
    session, clock, mic = listening(speech=True, max_open_turns=1, vad=NO_GUESS)
    turn_id = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0
    # one append holding the whole utterance: barge-in, then its end, in one batch
    actions = mic.say([0.9] * 19 + [0.0] * 16)
    assert RequestCancel(turn_id, "c1", "barge_in") in actions
    assert Send(ResponseAudioDone(turn_id, "interrupted")) in actions
    errors = [a.event for a in actions if isinstance(a, Send) and isinstance(a.event, ErrorEvent)]
    assert [e.code for e in errors] == ["too_many_turns"]


# ---- speculative end-pointing: a turn started on a guess that the user stopped talking ----
def guessed(mic: Mic) -> SubmitTurn:
    """Pad (0..5), speech (6..15), then 224 ms of silence: the loop guesses the utterance
    ended (frame 22) and the session submits it as a speculative turn."""
    assert mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6) == [Send(InputSpeechStarted("mic", 192.0))]
    [submit] = mic.say([0.0])
    assert isinstance(submit, SubmitTurn)
    return submit


def withdrawn(turn_id: str, at: float) -> list:
    """The actions of a withdrawal, in order."""
    event = TurnTruncated(
        turn_id=turn_id,
        conversation_id="c1",
        tenant_id="acme",
        user_id="alice",
        truncation=Truncation(turn_id, "", withdrawn=True),
        reason="withdrawn",
        truncated_at_ms=at,
    )
    return [RequestCancel(turn_id, "c1", "withdrawn"), PublishTruncation(event)]


def started(turn_id: str) -> TurnStarted:
    return TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt="a1")


def chunk(turn_id: str, seq: int, text: str) -> TokenChunk:
    return TokenChunk(turn_id=turn_id, seq=seq, text=text, emitted_at_ms=1, attempt="a1")


def test_a_pause_submits_a_speculative_turn_the_client_sees_only_once_confirmed():
    session, _, mic = listening()
    submit = guessed(mic)
    turn_id = submit.turn.turn_id
    guess = numbered(0, 6 + 10 + 7)  # the utterance so far: pad, speech, 224 ms of silence
    assert submit.turn.conversation_id == "c1" and submit.turn.text == ""
    assert submit.turn.media == [
        MediaRef(
            kind=MediaKind.AUDIO,
            sha256=sha256_hex(guess),
            size_bytes=len(guess),
            format="pcm16",
            sample_rate=16000,
        )
    ]
    assert submit.uploads == (Upload(sha256_hex(guess), guess),)
    assert submit.turn.truncates == []
    assert session.open_turns == [turn_id]
    # published, but the client hears nothing of it: no turn.accepted, no frames
    assert session.submit_succeeded(turn_id) == []
    assert session.relay(started(turn_id)) == []
    assert session.relay(chunk(turn_id, 0, "Hi")) == []
    assert session.relay(chunk(turn_id, 1, " there")) == []
    assert mic.say([0.0] * 8) == []  # 480 ms of silence: not confirmed yet
    # 512 ms: the silence rule confirms the guess; the held frames follow, in order
    assert mic.say([0.0]) == [
        Send(InputSpeechStopped("mic", 16 * 32.0, turn_id=turn_id)),
        Send(TurnAccepted(turn_id, "c1")),
        Send(ResponseStarted(turn_id, "m")),
        Send(ResponseDelta(turn_id, 0, "Hi")),
        Send(ResponseDelta(turn_id, 1, " there")),
    ]
    assert session.open_turns == [turn_id]  # no second turn
    # from now on its frames go straight to the client
    assert session.relay(chunk(turn_id, 2, "!")) == [Send(ResponseDelta(turn_id, 2, "!"))]
    [done] = session.relay(completed(turn_id, conversation_id="c1", text="Hi there!"))
    assert isinstance(done.event, ResponseDone)
    assert session.open_turns == []


def test_a_completion_held_for_a_guess_closes_the_turn_once_confirmed():
    session, _, mic = listening()
    turn_id = guessed(mic).turn.turn_id
    session.submit_succeeded(turn_id)
    assert session.relay(chunk(turn_id, 0, "Hi")) == []
    assert session.relay(completed(turn_id, conversation_id="c1", text="Hi")) == []
    assert session.open_turns == [turn_id]
    actions = mic.say([0.0] * 9)
    assert [type(a.event) for a in actions] == [
        InputSpeechStopped,
        TurnAccepted,
        ResponseDelta,
        ResponseDone,
    ]
    assert session.open_turns == []


def test_a_guess_confirmed_before_its_submit_succeeded_is_accepted_at_the_ack():
    session, _, mic = listening()
    turn_id = guessed(mic).turn.turn_id
    assert mic.say([0.0] * 8) == []
    # confirmed: the client learns the turn id; no second turn is submitted
    assert mic.say([0.0]) == [Send(InputSpeechStopped("mic", 16 * 32.0, turn_id=turn_id))]
    assert session.open_turns == [turn_id]
    assert session.relay(started(turn_id)) == []  # ahead of the Kafka ack: held
    assert session.submit_succeeded(turn_id) == [
        Send(TurnAccepted(turn_id, "c1")),
        Send(ResponseStarted(turn_id, "m")),
    ]
    assert session.relay(chunk(turn_id, 0, "Hi")) == [Send(ResponseDelta(turn_id, 0, "Hi"))]


def test_a_resumed_utterance_withdraws_the_guess_and_its_end_makes_a_new_turn():
    session, clock, mic = listening()
    clock.now = 2000.0
    first = guessed(mic).turn.turn_id
    assert session.submit_succeeded(first) == []
    clock.now = 2100.0
    # the user goes on talking (frame 23, 256 ms into the silence): the guess was wrong
    assert mic.say([0.9] * 10) == withdrawn(first, 2100.0)
    # its answer's frames go nowhere
    assert session.relay(started(first)) == []
    assert session.relay(chunk(first, 0, "Hi")) == []
    assert session.open_turns == [first]  # until its completion
    # the next pause guesses again: a new turn, with the whole utterance (frames 0..39),
    # carrying the withdrawal so the history never holds the first guess
    assert mic.say([0.0] * 6) == []
    [second] = mic.say([0.0])
    assert isinstance(second, SubmitTurn)
    turn_id = second.turn.turn_id
    assert turn_id != first
    assert second.turn.truncates == [Truncation(first, "", withdrawn=True)]
    utterance = numbered(0, 40)
    assert second.uploads == (Upload(sha256_hex(utterance), utterance),)
    assert session.open_turns == [first, turn_id]
    assert session.submit_succeeded(turn_id) == []
    # the withdrawn turn's end sends nothing and closes its route
    assert session.relay(completed(first, conversation_id="c1", text="Hi")) == []
    assert session.open_turns == [turn_id]
    # the utterance's real end confirms the second guess: no third turn
    assert mic.say([0.0] * 8) == []
    assert mic.say([0.0]) == [
        Send(InputSpeechStopped("mic", 33 * 32.0, turn_id=turn_id)),
        Send(TurnAccepted(turn_id, "c1")),
    ]
    assert session.open_turns == [turn_id]
    # the withdrawal was carried once
    assert next_turn(session).turn.truncates == []


def test_a_withdrawn_turns_ack_sends_nothing_and_frees_the_lane_for_the_next_guess():
    session, clock, mic = listening()
    first = guessed(mic).turn.turn_id
    assert mic.say([0.9] * 10) == withdrawn(first, clock.now)
    assert mic.say([0.0] * 6) == []
    # the second guess waits for the conversation's publish lane (the first is in flight)
    assert mic.say([0.0]) == []
    [second] = session.submit_succeeded(first)  # nothing for the client, the next submit
    assert isinstance(second, SubmitTurn)
    turn_id = second.turn.turn_id
    assert second.turn.truncates == [Truncation(first, "", withdrawn=True)]
    assert session.open_turns == [first, turn_id]
    # confirmed before its ack: turn.accepted comes with the ack
    assert mic.say([0.0] * 9) == [Send(InputSpeechStopped("mic", 33 * 32.0, turn_id=turn_id))]
    assert session.submit_succeeded(turn_id) == [Send(TurnAccepted(turn_id, "c1"))]
    assert session.relay(chunk(first, 0, "Hi")) == []
    assert session.relay(completed(first, conversation_id="c1", text="Hi")) == []
    assert session.open_turns == [turn_id]


def test_a_withdrawn_spoken_turns_audio_goes_nowhere():
    session, clock, mic = listening(speech=True)
    first = guessed(mic).turn.turn_id
    session.submit_succeeded(first)
    assert mic.say([0.9] * 10) == withdrawn(first, clock.now)
    assert session.relay(started(first)) == []
    assert session.relay(audio(first, 0, FIRST, 0, 1000)) == []
    assert session.relay(audio(first, 1, "", len(FIRST), 0, final=True)) == []
    assert session.relay(completed(first, conversation_id="c1", text=FIRST)) == []
    assert session.open_turns == []
    # its voice never played: it is not kept as an answer still playing
    assert only_error(interrupt(session, first)).code == "unknown_turn"


def test_after_a_barge_in_a_pause_submits_a_speculative_turn():
    session, clock, mic = listening(speech=True, vad=HEARD_AT_ONCE)
    answer = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0
    assert mic.say([0.9] * 18) == [Send(InputSpeechStarted("mic", 0.0))]
    assert mic.say([0.9]) == truncated(
        answer, "Hello", 400.0, reason="barge_in", at=5400.0, first_audio=5000.0, sent_ms=1000.0
    )
    assert mic.say([0.0] * 6) == []
    [submit] = mic.say([0.0])  # 224 ms of silence after the barge-in: a guess
    assert isinstance(submit, SubmitTurn)
    turn_id = submit.turn.turn_id
    assert submit.turn.truncates == [Truncation(answer, "Hello", 400.0)]
    assert submit.turn.speech == SpeechSettings("joe")
    assert session.submit_succeeded(turn_id) == []
    assert mic.say([0.0] * 9) == [
        Send(InputSpeechStopped("mic", 19 * 32.0, turn_id=turn_id)),
        Send(TurnAccepted(turn_id, "c1")),
    ]


def test_a_backchannel_over_the_assistant_is_never_guessed_to_be_a_turn():
    session, clock, mic = listening(speech=True, vad=HEARD_AT_ONCE)
    turn_id = speaking_turn(session, clock)
    # 384 ms over the answer, then 224 ms of silence: still no turn
    assert mic.say([0.9] * 12 + [0.0] * 7) == [
        Send(InputSpeechStarted("mic", 0.0)),
        CheckCommand("mic", 1, numbered(0, 15), ""),
    ]
    assert mic.say([0.0] * 9) == [Send(InputSpeechStopped("mic", 12 * 32.0, ignored="backchannel"))]
    assert session.open_turns == [turn_id]


# ---- speculative turns: what a void guess gives back, and when a guess is void ------------
def test_a_withdrawn_guess_gives_back_the_barge_in_truncation_it_carried():
    # regression: a guess took the conversation's pending truncations into its `truncates`;
    # withdrawn, it dropped them, so the history kept the whole interrupted answer
    session, clock, mic = listening(speech=True, vad=HEARD_AT_ONCE)
    answer = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0
    mic.say([0.9] * 18)
    assert mic.say([0.9]) == truncated(
        answer, "Hello", 400.0, reason="barge_in", at=5400.0, first_audio=5000.0, sent_ms=1000.0
    )
    assert mic.say([0.0] * 6) == []
    [guess] = mic.say([0.0])
    first = guess.turn.turn_id
    assert guess.turn.truncates == [Truncation(answer, "Hello", 400.0)]
    assert session.submit_succeeded(first) == []
    clock.now = 5700.0
    assert mic.say([0.9]) == withdrawn(first, 5700.0)
    # the next turn of the conversation carries both: the barge-in first
    assert mic.say([0.0] * 6) == []
    [second] = mic.say([0.0])
    assert isinstance(second, SubmitTurn) and second.turn.turn_id != first
    assert second.turn.truncates == [
        Truncation(answer, "Hello", 400.0),
        Truncation(first, "", withdrawn=True),
    ]
    assert session.submit_succeeded(second.turn.turn_id) == []
    assert next_turn(session).turn.truncates == []  # carried once


def test_a_withdrawn_guess_gives_back_to_a_typed_turn_too():
    session, clock, mic = listening(speech=True)
    answer = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0
    mic.say([0.9] * 19)  # barge-in
    mic.say([0.0] * 6)
    first = mic.say([0.0])[0].turn.turn_id
    session.submit_succeeded(first)
    assert mic.say([0.9]) == withdrawn(first, 5400.0)
    assert next_turn(session).turn.truncates == [
        Truncation(answer, "Hello", 400.0),
        Truncation(first, "", withdrawn=True),
    ]


def test_turning_detection_off_withdraws_the_guess_still_out():
    # regression: the guess outlived its voice loop: never confirmed nor withdrawn
    session, clock, mic = listening()
    clock.now = 3000.0
    first = guessed(mic).turn.turn_id
    assert update(session, turn_detection=None) == [
        *withdrawn(first, 3000.0),
        Send(SessionUpdated(None, None, VOICES)),
    ]
    # its ack, frames and completion send nothing; the completion closes its route
    assert session.submit_succeeded(first) == []
    assert session.relay(started(first)) == []
    assert session.relay(chunk(first, 0, "Hi")) == []
    assert session.open_turns == [first]
    assert session.relay(completed(first, conversation_id="c1", text="Hi")) == []
    assert session.open_turns == []
    assert next_turn(session).turn.truncates == [Truncation(first, "", withdrawn=True)]


def test_moving_detection_to_a_new_stream_withdraws_the_guess_of_the_old_one():
    # max_utterance_ms ends the new stream's utterance while the user still talks: no pause,
    # so no guess of its own; it must not confirm the old stream's guess
    session, clock, mic = listening(vad=VadRules(max_utterance_ms=640.0))
    clock.now = 3000.0
    first = guessed(mic).turn.turn_id  # frame 22, before the 640 ms cap (frame 25)
    assert session.submit_succeeded(first) == []
    moved = {"conversation_id": "c1", "stream_id": "mic2"}
    assert update(session, turn_detection=moved) == [
        *withdrawn(first, 3000.0),
        Send(SessionUpdated(None, TurnDetection("c1", "mic2"), VOICES)),
    ]
    mic2 = Mic(session, "mic2")
    mic2.n = 100  # audio unlike the old stream's
    [started_, stopped, submit] = mic2.say([0.9] * 20)
    assert started_ == Send(InputSpeechStarted("mic2", 0.0))
    assert isinstance(submit, SubmitTurn)
    turn_id = submit.turn.turn_id
    assert turn_id != first
    assert stopped == Send(InputSpeechStopped("mic2", 640.0, turn_id=turn_id))
    utterance = numbered(100, 20)
    assert submit.uploads == (Upload(sha256_hex(utterance), utterance),)
    assert submit.turn.truncates == [Truncation(first, "", withdrawn=True)]
    assert session.open_turns == [first, turn_id]
    assert session.submit_succeeded(turn_id) == [Send(TurnAccepted(turn_id, "c1"))]
    assert session.relay(completed(first, conversation_id="c1", text="Hi")) == []
    assert session.open_turns == [turn_id]


def test_an_update_that_keeps_the_detection_keeps_the_guess():
    session, _, mic = listening()
    turn_id = guessed(mic).turn.turn_id
    session.submit_succeeded(turn_id)
    assert update(session, turn_detection=DETECTION) == [
        Send(SessionUpdated(None, TurnDetection("c1", "mic"), VOICES))
    ]
    assert update(session, speech={"voice": "joe"}) == [
        Send(SessionUpdated(SpeechOptions("joe"), TurnDetection("c1", "mic"), VOICES))
    ]
    assert mic.say([0.0] * 9) == [
        Send(InputSpeechStopped("mic", 16 * 32.0, turn_id=turn_id)),
        Send(TurnAccepted(turn_id, "c1")),
    ]


def test_a_refused_guess_is_silent_and_the_utterance_end_reports_too_many_turns_once():
    session, _, mic = listening(max_open_turns=1)
    typed = next_turn(session, "c2").turn.turn_id  # the one turn allowed, still open
    assert mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6) == [Send(InputSpeechStarted("mic", 192.0))]
    assert mic.say([0.0]) == []  # the guess is refused: no error for the client
    assert session.open_turns == [typed]
    assert mic.say([0.0] * 8) == []
    err = only_error(mic.say([0.0]))
    assert err.code == "too_many_turns"
    assert session.open_turns == [typed]


def test_a_failed_guess_sends_no_error_and_the_utterance_end_submits_it_anew():
    session, _, mic = listening()
    first = guessed(mic).turn.turn_id
    assert session.submit_failed(first, BrokerUnavailable("kafka down")) == []
    assert session.open_turns == []
    assert mic.say([0.0] * 8) == []
    [stopped, submit] = mic.say([0.0])
    assert isinstance(submit, SubmitTurn)
    turn_id = submit.turn.turn_id
    assert turn_id != first
    assert stopped == Send(InputSpeechStopped("mic", 16 * 32.0, turn_id=turn_id))
    utterance = numbered(0, 6 + 10 + 16)
    assert submit.uploads == (Upload(sha256_hex(utterance), utterance),)
    assert submit.turn.truncates == []
    assert session.open_turns == [turn_id]
    assert session.submit_succeeded(turn_id) == [Send(TurnAccepted(turn_id, "c1"))]


def test_a_failed_guess_gives_back_the_barge_in_truncation_it_carried():
    session, clock, mic = listening(speech=True)
    answer = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0
    mic.say([0.9] * 19)  # barge-in
    mic.say([0.0] * 6)
    [guess] = mic.say([0.0])
    assert guess.turn.truncates == [Truncation(answer, "Hello", 400.0)]
    assert session.submit_failed(guess.turn.turn_id, BrokerUnavailable("down")) == []
    [stopped, submit] = mic.say([0.0] * 9)
    assert isinstance(stopped.event, InputSpeechStopped) and isinstance(submit, SubmitTurn)
    assert submit.turn.truncates == [Truncation(answer, "Hello", 400.0)]


def test_a_failed_guess_frees_the_lane_for_the_turn_waiting_behind_it():
    session, _, mic = listening()
    first = guessed(mic).turn.turn_id
    assert session.receive(frame(type="turn.create", conversation_id="c1", text="x")) == []
    [waiting] = session.submit_failed(first, BrokerUnavailable("down"))
    assert isinstance(waiting, SubmitTurn) and waiting.turn.text == "x"


def test_a_confirmed_guess_that_fails_reports_the_error():
    session, _, mic = listening()
    turn_id = guessed(mic).turn.turn_id
    mic.say([0.0] * 9)  # confirmed before its ack: the client knows the turn
    err = only_error(session.submit_failed(turn_id, BrokerUnavailable("down")))
    assert (err.code, err.turn_id) == ("broker_unavailable", turn_id)
    assert session.open_turns == []


def test_a_withdrawn_guess_that_fails_sends_nothing():
    session, _, mic = listening()
    first = guessed(mic).turn.turn_id
    mic.say([0.9])  # withdrawn
    assert session.submit_failed(first, BrokerUnavailable("down")) == []
    assert session.open_turns == []
    assert next_turn(session).turn.truncates == [Truncation(first, "", withdrawn=True)]


def test_a_guess_withdrawn_after_the_token_expired_is_still_cancelled():
    session, clock, mic = listening()
    first = guessed(mic).turn.turn_id
    assert session.submit_succeeded(first) == []
    # the frame that resumes the utterance is appended while the token is still valid...
    resume = numbered(mic.n, 1)
    [detect] = session.receive(frame(type="audio.append", stream_id="mic", data=b64(resume)))
    # ...then the token expires: the next message drops the principal
    clock.now = (session.principal.expires_at_s + 1) * 1000
    late = frame(type="audio.append", stream_id="mic", data=b64(numbered(0, 1)))
    assert only_error(session.receive(late)).code == "token_expired"
    assert not session.authenticated
    # the scores arrive: the guess is withdrawn and stopped, with no truncation published
    assert session.voice_activity("mic", detect.frames, [0.9]) == [
        RequestCancel(first, "c1", "withdrawn")
    ]
    assert session.relay(started(first)) == []
    assert session.relay(chunk(first, 0, "Hi")) == []
    assert session.relay(completed(first, conversation_id="c1", text="Hi")) == []
    assert session.open_turns == []
    # a renewed token: the conversation's next turn still carries the withdrawal
    renewed = mint_token(SECRET, "alice", "acme", ttl_s=10**7)
    session.receive(frame(type="session.authenticate", token=renewed))
    assert session.authenticated
    assert next_turn(session).turn.truncates == [Truncation(first, "", withdrawn=True)]


# ---- semantic end of turn: the audio turn model decides at each pause ------------------------
SEMANTIC = {**DETECTION, "type": "semantic_vad"}


def semantic(eagerness: str = "auto", **limits):
    session, clock = make(**limits)
    [updated] = update(session, turn_detection={**SEMANTIC, "eagerness": eagerness})
    assert updated.event.turn_detection == TurnDetection("c1", "mic", "semantic_vad", eagerness)
    return session, clock, Mic(session)


def a_guess_that_sounds_finished() -> tuple[Session, Mic, str]:
    """A semantic_vad utterance paused 224 ms: its guess submitted and accepted, the turn
    model's verdict "complete" (0.97) in; the words decide what happens next."""
    session, _, mic = semantic()
    mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6)
    [submit, check] = mic.say([0.0])
    turn_id = submit.turn.turn_id
    session.submit_succeeded(turn_id)
    assert session.turn_verdict("mic", check.pause_id, 0.97) == []
    return session, mic, turn_id


def test_semantic_vad_guesses_and_asks_the_model_at_a_pause_then_answers_on_its_verdict():
    session, _, mic = semantic()
    assert mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6) == [Send(InputSpeechStarted("mic", 192.0))]
    [submit, check] = mic.say([0.0])  # 224 ms of silence: a guess, and a question
    assert isinstance(submit, SubmitTurn)
    assert submit.turn.speculative and submit.turn.judge_sentence_end  # its words are read
    turn_id = submit.turn.turn_id
    assert check == CheckTurn("mic", check.pause_id, numbered(0, 23))
    assert session.submit_succeeded(turn_id) == []  # unseen until the end of turn
    assert mic.say([0.0] * 3) == []
    # the model says the user finished: its sound is complete, the guess's words decide
    assert session.turn_verdict("mic", check.pause_id, 0.97) == []
    heard = InputTranscribed(turn_id=turn_id, text="What time is it?", segments=[], audio_s=0.3)
    # the words end a sentence: the turn is the user's at once, with what it heard
    assert session.relay(heard) == [
        Send(InputSpeechStopped("mic", 16 * 32.0, turn_id=turn_id)),
        Send(TurnAccepted(turn_id, "c1")),
        Send(InputTranscript(turn_id, "What time is it?", [], 0.3)),
    ]
    assert session.open_turns == [turn_id]


def test_semantic_vad_keeps_listening_when_the_guess_stops_mid_sentence():
    session, _, mic = semantic()
    mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6)
    [submit, check] = mic.say([0.0])
    turn_id = submit.turn.turn_id
    session.submit_succeeded(turn_id)
    assert session.turn_verdict("mic", check.pause_id, 0.97) == []  # sounds finished...
    words = "Can you tell me how to get to the"
    heard = InputTranscribed(turn_id=turn_id, text=words, segments=[], audio_s=0.3)
    assert session.relay(heard) == []  # ... the words are not: the user is not cut off
    assert mic.say([0.0] * 20) == []  # 864 ms of silence, still listening
    # the rest of the sentence: the guess is withdrawn, the whole utterance answered later
    assert RequestCancel(turn_id, "c1", "withdrawn") in mic.say([0.9] * 5)


def misheard(turn_id: str, logprob: float, language_probability: float, **more):
    """A whole sentence by the lists, misheard (Whisper base on a voice it cannot read), with
    how sure the ASR was of it."""
    return InputTranscribed(
        turn_id=turn_id,
        text="Que tiempo va a hacer manllán.",
        segments=[],
        audio_s=0.3,
        language="es",
        logprob=logprob,
        language_probability=language_probability,
        **more,
    )


@pytest.mark.parametrize("judging", [False, True], ids=["lists", "text-model-to-follow"])
@pytest.mark.parametrize(
    ("logprob", "language_probability"),
    [(-1.1, 1.0), (-0.3, 0.41)],
    ids=["tokens-unsure", "language-unsure"],
)
def test_semantic_vad_keeps_listening_on_words_the_asr_could_not_read(
    logprob, language_probability, judging
):
    session, mic, turn_id = a_guess_that_sounds_finished()
    heard = misheard(turn_id, logprob, language_probability, judging=judging)
    # not trusted: an unfinished pause at once (no text model verdict is waited for: the
    # words are not trusted whatever it says), which only 2 s of silence ends
    assert session.relay(heard) == []
    assert mic.say([0.0] * 40) == []  # 1.5 s of silence: still listening
    assert RequestCancel(turn_id, "c1", "withdrawn") in mic.say([0.9] * 5)


def test_semantic_vad_ends_on_the_same_words_read_surely():
    session, _, turn_id = a_guess_that_sounds_finished()
    heard = misheard(turn_id, logprob=-0.3, language_probability=0.97)
    assert Send(TurnAccepted(turn_id, "c1")) in session.relay(heard)


def test_semantic_vad_words_wait_for_the_text_models_verdict_that_follows_them():
    session, mic, turn_id = a_guess_that_sounds_finished()
    words = "Tell me why the sky is"  # no word list catches it: the text model does
    heard = InputTranscribed(turn_id=turn_id, text=words, segments=[], audio_s=0.3, judging=True)
    assert session.relay(heard) == []  # the verdict is on its way: not judged on the lists
    started = TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt="a1")
    assert session.relay(started) == []  # the answer runs meanwhile
    assert session.relay(SentenceEndJudged(turn_id=turn_id, ends_sentence=0.002)) == []
    assert mic.say([0.0] * 20) == []  # unfinished: still listening after 864 ms of silence
    assert RequestCancel(turn_id, "c1", "withdrawn") in mic.say([0.9] * 5)


def test_semantic_vad_a_verdict_that_the_message_ends_confirms_the_guess_at_once():
    session, _, turn_id = a_guess_that_sounds_finished()
    heard = InputTranscribed(
        turn_id=turn_id, text="What time is it", segments=[], audio_s=0.3, judging=True
    )
    assert session.relay(heard) == []
    started = TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt="a1")
    assert session.relay(started) == []
    # the verdict confirms the turn: the client gets it in the order it was produced, and
    # never the verdict itself
    assert session.relay(SentenceEndJudged(turn_id=turn_id, ends_sentence=0.4)) == [
        Send(InputSpeechStopped("mic", 16 * 32.0, turn_id=turn_id)),
        Send(TurnAccepted(turn_id, "c1")),
        Send(InputTranscript(turn_id, "What time is it", [], 0.3)),
        Send(ResponseStarted(turn_id, "m")),
    ]
    # a verdict arriving after the turn is the user's changes nothing
    assert session.relay(SentenceEndJudged(turn_id=turn_id, ends_sentence=0.0)) == []


def test_semantic_vad_a_guess_that_fails_without_words_ends_a_complete_turn():
    session, _, turn_id = a_guess_that_sounds_finished()
    failed = completed(
        turn_id,
        conversation_id="c1",
        text="",
        finish_reason=FinishReason.ERROR,
        error=ErrorInfo(code="no_speech", message="no speech"),
    )
    actions = session.relay(failed)
    assert Send(InputSpeechStopped("mic", 16 * 32.0, turn_id=turn_id)) in actions


def test_semantic_vad_waits_out_a_pause_the_model_calls_unfinished():
    session, _, mic = semantic(vad=VadRules(early_silence_ms=0))  # no guessing
    mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6)
    [check] = mic.say([0.0])
    assert isinstance(check, CheckTurn)
    assert session.turn_verdict("mic", check.pause_id, 0.1) == []
    # a second of silence (the silence rule would have ended it at 500 ms), then more words
    assert mic.say([0.0] * 31) == []
    assert mic.say([0.9] * 10) == []
    [check2] = mic.say([0.0] * 7)
    assert check2.pause_id == check.pause_id + 1 and check2.pcm == numbered(0, 6 + 10 + 38 + 17)
    [stopped, submit] = session.turn_verdict("mic", check2.pause_id, 0.9)
    assert isinstance(submit, SubmitTurn)
    assert stopped == Send(InputSpeechStopped("mic", 64 * 32.0, turn_id=submit.turn.turn_id))
    # the whole utterance, both halves, is the turn
    assert submit.uploads[0].data[: 64 * FRAME_BYTES] == numbered(0, 64)


def test_semantic_vad_without_a_verdict_falls_back_to_the_silence_rule():
    session, _, mic = semantic(vad=VadRules(early_silence_ms=0))
    mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6)
    [check] = mic.say([0.0])
    assert session.turn_verdict("mic", check.pause_id, None) == []  # 224 ms < 500 ms
    [stopped, submit] = mic.say([0.0] * 9)
    assert isinstance(submit, SubmitTurn) and stopped.event.audio_end_ms == 16 * 32.0


def test_semantic_vad_eagerness_picks_the_rules_and_server_vad_asks_nothing():
    for eagerness in ("low", "high"):
        session, _, _ = semantic(eagerness)
        assert session._voice_loop.turn == EAGERNESS[eagerness]
    session, _, mic = listening()  # server_vad: the silence rule, no model
    mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6)
    assert not any(isinstance(a, CheckTurn) for a in mic.say([0.0] * 20))


def test_switching_to_semantic_vad_on_the_same_stream_keeps_listening():
    session, _, mic = listening()
    update(session, turn_detection=SEMANTIC)
    mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6)
    assert any(isinstance(a, CheckTurn) for a in mic.say([0.0]))


def test_a_verdict_for_another_stream_or_after_detection_off_is_ignored():
    session, _, mic = semantic(vad=VadRules(early_silence_ms=0))
    mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6)
    [check] = mic.say([0.0])
    assert session.turn_verdict("other", check.pause_id, 0.99) == []
    update(session, turn_detection=None)
    assert session.turn_verdict("mic", check.pause_id, 0.99) == []


def test_the_voice_loops_language_hint_rides_on_each_utterance():
    session, _ = make()
    update(session, turn_detection={**DETECTION, "language": "es"})
    mic = Mic(session)
    mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6)
    [submit] = mic.say([0.0])
    assert submit.turn.media[0].language == "es"


def test_a_spoken_turn_that_ends_without_text_ends_its_speech_at_once():
    """Refused by the input screen: no engine ran, no speech will come; the client hears so
    with the end of the text, not after the speech deadline."""
    session, _ = make()
    turn_id = spoken_turn(session)
    refusal = ErrorInfo("input_blocked", "I can't help with that.", retryable=False)
    actions = session.relay(
        completed(turn_id, conversation_id="c1", text="", finish_reason="safety", error=refusal)
    )
    assert actions[-2] == Send(ResponseAudioDone(turn_id, "safety", refusal))
    assert actions[-1] == delivered(turn_id, 0.0, audio_ms=0.0, reason="safety", at=1000.0)
    assert isinstance(actions[-3].event, ResponseDone)
    assert session.open_turns == [] and not session.awaits_audio(turn_id)


def test_a_spoken_turn_with_text_still_waits_for_its_speech():
    session, _ = make()
    turn_id = spoken_turn(session)
    [done] = session.relay(completed(turn_id, conversation_id="c1", text=ANSWER))
    assert isinstance(done.event, ResponseDone)
    assert session.awaits_audio(turn_id)


def test_a_withdrawn_guess_never_shows_its_tool_calls_and_a_spoken_turn_offers_session_tools():
    """A call made by an answer to a guess that proved wrong must never reach the client
    (it would run a side effect for words the user had not finished saying)."""
    session, clock, mic = listening()
    weather = {"type": "function", "function": {"name": "get_weather"}}
    update(session, tools=[weather])
    clock.now = 2000.0
    submit = guessed(mic)
    first = submit.turn.turn_id
    assert [t.name for t in submit.turn.tools] == ["get_weather"]  # the session's tools
    session.submit_succeeded(first)
    call = ToolCall(call_id(first, 0), "get_weather", '{"city":"Oslo"}')
    piece = TokenChunk(
        turn_id=first,
        seq=0,
        text='{"name":"get_weather"',
        emitted_at_ms=1,
        attempt="a1",
        call_index=0,
    )
    assert session.relay(started(first)) == [] and session.relay(piece) == []  # held
    clock.now = 2100.0
    assert mic.say([0.9] * 10) == withdrawn(first, 2100.0)
    done = completed(first, conversation_id="c1", finish_reason="tool_calls", tool_calls=[call])
    assert session.relay(done) == []  # void: no tool_call.done, no response.done
    assert session.open_turns == []


def test_a_guess_offering_side_effecting_server_tools_is_marked_once_confirmed():
    """The deployment's side-effecting tools wait for a guessed turn's confirmation (the
    tools worker reads the mark); a guess without such tools costs no mark."""
    catalog = ServerTools(
        AllowList.parse("*=kv__*"),
        [ToolSpec("kv__put", server="kv"), ToolSpec("kv__get", server="kv", read_only=True)],
    )
    for allowed, marked in ((None, True), (["get"], False)):
        session, _, mic = listening()
        session._server_tools = catalog
        update(session, tools=[{"type": "mcp", "server_label": "kv", "allowed_tools": allowed}])
        submit = guessed(mic)
        turn_id = submit.turn.turn_id
        assert submit.turn.speculative
        session.submit_succeeded(turn_id)
        assert mic.say([0.0] * 8) == []
        confirmed = mic.say([0.0])
        assert confirmed[0] == Send(InputSpeechStopped("mic", 16 * 32.0, turn_id=turn_id))
        assert (ConfirmTurn(turn_id) in confirmed) is marked


def test_a_server_vad_guess_asks_for_no_text_judgement():
    _, _, mic = listening()
    mic.say([0.0] * 6 + [0.9] * 10 + [0.0] * 6)
    [submit] = [a for a in mic.say([0.0]) if isinstance(a, SubmitTurn)]
    assert submit.turn.speculative and not submit.turn.judge_sentence_end


# ---- interim transcripts ------------------------------------------------------------------
def interim_listening(**detection):
    """A session listening with interim transcripts every 10 frames (320 ms) of speech."""
    session, clock = make(vad=VadRules(early_silence_ms=0, interim_ms=320.0))
    update(session, turn_detection={**DETECTION, "interim_transcripts": True, **detection})
    return session, clock, Mic(session)


def reads(actions) -> list[TranscribeSoFar]:
    return [a for a in actions if isinstance(a, TranscribeSoFar)]


def test_interim_words_are_read_one_at_a_time_and_shown_while_the_user_speaks():
    session, _, mic = interim_listening(language="es")
    assert session.wants_interim
    [read] = reads(mic.say([0.9] * 10))
    assert read == TranscribeSoFar("mic", 1, 0.0, 320.0, numbered(0, 10), "es")
    # the first read is still out: the next 320 ms of speech asks for none
    assert reads(mic.say([0.9] * 10)) == []
    shown = session.interim_heard("mic", read, Interim("Hola, ¿qué", "es"))
    assert shown == [Send(InputTranscriptInterim("mic", "Hola, ¿qué", 0.0, 320.0, "es"))]
    # the read came back: the next 320 ms asks again, for all that was said
    [again] = reads(mic.say([0.9] * 10))
    assert (again.end_ms, again.pcm) == (960.0, numbered(0, 30))


def test_interim_words_of_an_utterance_that_ended_or_of_no_read_are_not_shown():
    session, _, mic = interim_listening()
    [read] = reads(mic.say([0.9] * 10))
    assert session.interim_heard("mic", read, None) == []  # skipped (the edge was busy)
    [late] = reads(mic.say([0.9] * 10))
    ended = mic.say([0.0] * 16)  # the silence rule ends it: a turn, with its own transcript
    assert any(isinstance(a, SubmitTurn) for a in ended)
    assert session.interim_heard("mic", late, Interim("What is the", "en")) == []
    # the next utterance's reads are its own
    [next_read] = reads(mic.say([0.9] * 10))
    assert next_read.utterance == 2
    assert session.interim_heard("other", next_read, Interim("words", "en")) == []
    update(session, turn_detection=DETECTION)  # interim transcripts turned off meanwhile
    assert not session.wants_interim
    assert session.interim_heard("mic", next_read, Interim("words", "en")) == []


def test_interim_words_the_reader_could_not_read_are_not_shown():
    """A second of English the multilingual model was unsure of the language of (it read
    Thai script once): not shown; the next read, surer, is."""
    session, _, mic = interim_listening()
    [read] = reads(mic.say([0.9] * 10))
    unsure = Interim("คลุณอยู่เถอะ", "th", logprob=-0.9, language_probability=0.27)
    assert session.interim_heard("mic", read, unsure) == []
    [again] = reads(mic.say([0.9] * 10))
    sure = Interim("Could you tell me about", "en", logprob=-0.4, language_probability=0.96)
    assert session.interim_heard("mic", again, sure) == [
        Send(InputTranscriptInterim("mic", "Could you tell me about", 0.0, 640.0, "en"))
    ]


def test_no_interim_reads_unless_asked_for():
    session, _, mic = listening(vad=VadRules(early_silence_ms=0, interim_ms=320.0))
    assert not session.wants_interim
    assert reads(mic.say([0.9] * 40)) == []

"""Spoken answers at the edge: speech settings, audio relay, interrupts and truncations,
and the voice loop (utterances become turns, barge-in, backchannels). Pure session, fake
clock."""

from __future__ import annotations

from base64 import b64encode

from schemas.blobs import sha256_hex
from schemas.events import (
    ErrorInfo,
    MediaKind,
    MediaRef,
    SpeechAudio,
    SpeechSettings,
    TokenChunk,
    Truncation,
    TurnStarted,
    TurnTruncated,
)
from tests.support.factories import completed
from tests.unit.test_session import SECRET, frame, only_error
from ws_edge.auth import mint_token
from ws_edge.media import Upload
from ws_edge.messages import (
    ErrorEvent,
    InputSpeechStarted,
    InputSpeechStopped,
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
from ws_edge.session import (
    DetectSpeech,
    DropAudio,
    PublishTruncation,
    RequestCancel,
    Send,
    Session,
    SessionLimits,
    SubmitTurn,
)
from ws_edge.voice_loop import FRAME_BYTES

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


def interrupt(session: Session, turn_id: str, **fields):
    return session.receive(frame(type="turn.interrupt", turn_id=turn_id, **fields))


def next_turn(session: Session, conversation_id: str = "c1") -> SubmitTurn:
    [submit] = session.receive(frame(type="turn.create", conversation_id=conversation_id, text="x"))
    assert isinstance(submit, SubmitTurn)
    session.submit_succeeded(submit.turn.turn_id)  # frees the conversation's publish lane
    return submit


def truncated(turn_id, text, audio_end_ms, *, reason, at, cancel=True, audio_done=True):
    """The actions of an interrupt, in order."""
    truncation = Truncation(turn_id, text, audio_end_ms)
    actions = [DropAudio(turn_id)]
    if cancel:
        actions.append(RequestCancel(turn_id, "c1", reason))
    if audio_done:
        actions.append(Send(ResponseAudioDone(turn_id, "interrupted")))
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
    assert [type(a.event) for a in actions] == [ResponseAudio, ResponseAudioDone]
    assert actions[1] == Send(ResponseAudioDone(turn_id, "completed"))
    assert session.open_turns == []
    assert not session.awaits_audio(turn_id)
    assert session.relay(audio(turn_id, 2, "late", 25, 100)) == []


def test_empty_final_audio_sends_only_audio_done():
    session, _ = make()
    turn_id = spoken_turn(session)
    session.relay(completed(turn_id, conversation_id="c1", text=ANSWER))
    final = audio(turn_id, 0, "", 0, 0, final=True)
    assert session.relay(final) == [Send(ResponseAudioDone(turn_id, "completed"))]


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
    assert actions == [Send(ResponseAudioDone(turn_id, "cancelled"))]


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
        Send(ResponseAudioDone(turn_id, "tts_unavailable", error))
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
    assert actions == truncated(turn_id, "Hello ", 700.0, reason="interrupt", at=5100.0)
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
    assert next_turn(session, "other").turn.truncates is None
    assert next_turn(session, "c1").turn.truncates == Truncation(turn_id, FIRST, 1000.0)
    assert next_turn(session, "c1").turn.truncates is None  # carried once


def test_interrupt_without_audio_end_ms_estimates_from_the_clock():
    session, clock = make()
    turn_id = spoken_turn(session)
    clock.now = 5000.0  # the first audio frame leaves
    session.relay(audio(turn_id, 0, FIRST, 0, 1000))
    clock.now = 5600.0
    session.relay(audio(turn_id, 1, SECOND, 13, 500))
    clock.now = 6250.0  # 1250 ms since the first audio: 250 ms into "how are you?"
    actions = interrupt(session, turn_id)
    assert actions == truncated(turn_id, "Hello there, how ", 1250.0, reason="interrupt", at=6250.0)


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
    assert next_turn(session).turn.truncates == Truncation(turn_id, "", 0.0)


def test_interrupt_after_text_done_still_cancels_speech():
    session, clock = make()
    turn_id = spoken_turn(session)
    speak_all(session, clock, turn_id, at=5000.0)  # text done, final audio not yet
    clock.now = 5500.0
    actions = interrupt(session, turn_id)
    assert actions == truncated(turn_id, "Hello ", 500.0, reason="interrupt", at=5500.0)
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
    assert next_turn(session).turn.truncates is None


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
    # BUG (ws_edge/session.py, `_handle_message`, the InterruptTurn branch): it looks the
    # turn up in `self._played` without checking that its audio is still playing by the
    # clock; `_played` is pruned only by `_speaking()` (voice loop) or MAX_PLAYED, so an
    # interrupt long after playback ended still "truncates" (to the whole answer) and
    # publishes a TurnTruncated instead of answering unknown_turn.
    session, clock = make()
    turn_id = played_turn(session, clock, at=5000.0)
    clock.now = 6600.0  # 1600 ms since the first audio: all 1500 ms played
    err = only_error(interrupt(session, turn_id))
    assert err.code == "unknown_turn"


# ---- the voice loop ------------------------------------------------------------------------
DETECTION = {"conversation_id": "c1", "stream_id": "mic"}


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
    session, _, mic = listening()
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
    session, clock, mic = listening(speech=True)
    turn_id = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0  # 400 ms of the answer played: "Hello" heard, "there" not
    assert mic.say([0.9] * 18) == [Send(InputSpeechStarted("mic", 0.0))]
    actions = mic.say([0.9])  # 608 ms of speech
    assert actions == truncated(turn_id, "Hello", 400.0, reason="barge_in", at=5400.0)
    assert mic.say([0.9] * 20) == []  # one barge-in
    [stopped, submit] = mic.say([0.0] * 16)
    new_id = submit.turn.turn_id
    assert stopped == Send(InputSpeechStopped("mic", 39 * 32.0, turn_id=new_id))
    assert submit.turn.truncates == Truncation(turn_id, "Hello", 400.0)
    assert submit.turn.speech == SpeechSettings("joe")
    # the interrupted answer's remaining frames are dropped
    assert session.relay(audio(turn_id, 1, SECOND, 13, 500)) == []


def test_a_backchannel_over_the_assistant_is_ignored():
    session, clock, mic = listening(speech=True)
    turn_id = speaking_turn(session, clock)
    events = mic.say([0.9] * 12 + [0.0] * 16)
    assert events == [
        Send(InputSpeechStarted("mic", 0.0)),
        Send(InputSpeechStopped("mic", 12 * 32.0, ignored="backchannel")),
    ]
    assert session.open_turns == [turn_id]  # not interrupted, no new turn
    [sent] = session.relay(audio(turn_id, 1, SECOND, 13, 500))
    assert isinstance(sent.event, ResponseAudio)
    assert next_turn(session).turn.truncates is None


def test_speech_while_the_assistant_is_silent_never_barges_in():
    session, clock, mic = listening(speech=True)
    played_turn(session, clock, at=5000.0)
    clock.now = 6600.0  # its 1500 ms of audio finished playing
    events = mic.say([0.9] * 40 + [0.0] * 16)
    assert [type(a) for a in events] == [Send, Send, SubmitTurn]
    assert [type(a.event) for a in events[:2]] == [InputSpeechStarted, InputSpeechStopped]
    assert events[2].turn.truncates is None


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
    # BUG (ws_edge/session.py, `voice_activity` / `_voice_events`): the events of one batch
    # are turned into actions in one `_answering_errors` step; when the SpeechEnded's
    # `_utterance_turn` raises (here too_many_turns), every action gathered before it is
    # dropped, though `_interrupt` already changed the state (route.interrupted, the pending
    # truncation): the RequestCancel, response.audio.done and PublishTruncation of the
    # barge-in never go out, and the answer keeps generating while the edge drops it.
    session, clock, mic = listening(speech=True, max_open_turns=1)
    turn_id = speaking_turn(session, clock, at=5000.0)
    clock.now = 5400.0
    # one append holding the whole utterance: barge-in, then its end, in one batch
    actions = mic.say([0.9] * 19 + [0.0] * 16)
    assert RequestCancel(turn_id, "c1", "barge_in") in actions
    assert Send(ResponseAudioDone(turn_id, "interrupted")) in actions
    errors = [a.event for a in actions if isinstance(a, Send) and isinstance(a.event, ErrorEvent)]
    assert [e.code for e in errors] == ["too_many_turns"]

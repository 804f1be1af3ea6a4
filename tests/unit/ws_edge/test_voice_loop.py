"""The voice loop's end-pointing: synthetic frames with chosen VAD scores, exact events."""

from __future__ import annotations

from ws_edge.voice.loop import (
    EAGERNESS,
    FRAME_BYTES,
    FRAME_MS,
    BargeIn,
    CommandCheck,
    SpeechEnded,
    SpeechPaused,
    SpeechResumed,
    SpeechSoFar,
    SpeechStarted,
    TurnRules,
    VadRules,
    VoiceLoop,
)

SPEECH = 0.9
SILENCE = 0.0
# the end-pointing rules without speculation (no SpeechPaused / SpeechResumed)
NO_GUESS = VadRules(early_silence_ms=0)


def frame(n: int) -> bytes:
    """Frame number `n` of the stream: its bytes say which frame it is."""
    return bytes([n % 251]) * FRAME_BYTES


def frames(first: int, count: int) -> bytes:
    return b"".join(frame(n) for n in range(first, first + count))


class Mic:
    """Feeds a loop numbered frames through `append`, then `scored`."""

    def __init__(self, rules: VadRules | None = None) -> None:
        self.loop = VoiceLoop(rules or VadRules())
        self.n = 0  # frames fed so far

    def feed(self, probs: list[float], *, speaking: bool = False):
        pcm = frames(self.n, len(probs))
        whole = self.loop.append(pcm)
        assert whole == pcm
        self.n += len(probs)
        return self.loop.scored(whole, probs, assistant_speaking=speaking)


def test_frame_is_32_ms_of_16_khz_pcm16():
    assert FRAME_BYTES == 1024
    assert FRAME_MS == 32.0


def test_append_returns_whole_frames_only_and_keeps_the_remainder():
    loop = VoiceLoop(VadRules())
    assert loop.append(b"\x01" * 100) == b""
    first = loop.append(b"\x01" * (FRAME_BYTES - 100) + b"\x02" * 10)
    assert first == b"\x01" * FRAME_BYTES
    second = loop.append(b"\x03" * (2 * FRAME_BYTES))
    assert second == b"\x02" * 10 + b"\x03" * (2 * FRAME_BYTES - 10)
    assert len(second) == 2 * FRAME_BYTES
    # 10 bytes of \x03 are left over for the next call
    assert loop.append(b"\x04" * (FRAME_BYTES - 10)) == b"\x03" * 10 + b"\x04" * (FRAME_BYTES - 10)
    assert loop.append(b"") == b""


def test_silence_produces_no_events():
    mic = Mic()
    assert mic.feed([SILENCE] * 200) == []


def test_speech_is_confirmed_only_after_min_speech_ms():
    mic = Mic()
    assert mic.feed([SILENCE] * 10) == []
    # 7 frames = 224 ms < 250 ms: not yet a turn
    assert mic.feed([SPEECH] * 7) == []
    # the 8th frame makes 256 ms: announced, with the time speech began
    assert mic.feed([SPEECH]) == [SpeechStarted(at_ms=320.0)]
    assert mic.feed([SPEECH] * 20) == []  # announced once


def test_a_click_shorter_than_min_speech_produces_no_events():
    mic = Mic(NO_GUESS)
    events = mic.feed([SILENCE] * 10 + [SPEECH] * 3 + [SILENCE] * 40)
    assert events == []
    # the click's audio is not carried into the next utterance: only the pad is
    events = mic.feed([SPEECH] * 10 + [SILENCE] * 16)  # speech at frames 53..62
    assert events == [
        SpeechStarted(at_ms=53 * 32.0),
        SpeechEnded(
            start_ms=53 * 32.0,
            end_ms=63 * 32.0,
            pcm=frames(47, 6 + 10 + 16),
            backchannel=False,
        ),
    ]


def test_speech_ends_after_silence_ms_with_the_pad_before_it():
    mic = Mic(NO_GUESS)
    events = mic.feed([SILENCE] * 10 + [SPEECH] * 10 + [SILENCE] * 15)
    assert events == [SpeechStarted(at_ms=320.0)]  # 15 x 32 = 480 ms < 500 ms of silence
    [ended] = mic.feed([SILENCE])  # 16 x 32 = 512 ms
    # pad: int(200 / 32) = 6 frames (4..9) before speech (10..19), then the silence (20..35)
    assert ended == SpeechEnded(start_ms=320.0, end_ms=640.0, pcm=frames(4, 32), backchannel=False)
    assert ended.duration_ms == 320.0
    assert len(ended.pcm) == 32 * FRAME_BYTES
    assert ended.pcm[: 6 * FRAME_BYTES] == frames(4, 6)  # the pad
    assert ended.pcm[6 * FRAME_BYTES : 16 * FRAME_BYTES] == frames(10, 10)  # the speech


def test_pad_shorter_than_the_silence_before_speech():
    mic = Mic(VadRules(pad_ms=100.0, early_silence_ms=0))  # int(100 / 32) = 3 frames
    mic.feed([SILENCE] * 10 + [SPEECH] * 10)
    [ended] = mic.feed([SILENCE] * 16)
    assert ended.pcm == frames(7, 3 + 10 + 16)


def test_hysteresis_keeps_speech_going_between_threshold_less_015_and_threshold():
    mic = Mic(NO_GUESS)
    # speech 0..9, then 20 frames at 0.4 (below 0.5 but above 0.35): still speech
    events = mic.feed([SPEECH] * 10 + [0.4] * 20 + [SILENCE] * 15)
    assert events == [SpeechStarted(at_ms=0.0)]
    [ended] = mic.feed([SILENCE])
    assert (ended.start_ms, ended.end_ms) == (0.0, 30 * 32.0)


def test_below_the_hysteresis_band_is_silence():
    mic = Mic(NO_GUESS)
    events = mic.feed([SPEECH] * 10 + [0.3] * 16)
    assert events == [
        SpeechStarted(at_ms=0.0),
        SpeechEnded(start_ms=0.0, end_ms=320.0, pcm=frames(0, 26), backchannel=False),
    ]


def test_hysteresis_does_not_start_speech():
    mic = Mic()
    assert mic.feed([0.45] * 100) == []


def test_max_utterance_forces_an_end_and_the_stream_goes_on():
    mic = Mic(VadRules(max_utterance_ms=640.0))  # 20 frames
    events = mic.feed([SPEECH] * 19)
    assert events == [SpeechStarted(at_ms=0.0)]
    events = mic.feed([SPEECH])
    assert events == [SpeechEnded(start_ms=0.0, end_ms=640.0, pcm=frames(0, 20), backchannel=False)]
    # still talking: a new utterance starts at once (frame 20), announced after 8 frames
    assert mic.feed([SPEECH] * 7) == []
    assert mic.feed([SPEECH]) == [SpeechStarted(at_ms=640.0)]


def test_barge_in_over_the_assistant_after_barge_in_ms():
    mic = Mic(NO_GUESS)
    assert mic.feed([SILENCE] * 6, speaking=True) == []
    events = mic.feed([SPEECH] * 18, speaking=True)  # 18 x 32 = 576 ms < 600 ms
    assert events == [SpeechStarted(at_ms=192.0, over_assistant=True)]
    assert not mic.loop.barged_in
    events = mic.feed([SPEECH], speaking=True)  # 19 x 32 = 608 ms
    assert events == [BargeIn(at_ms=24 * 32.0)]
    assert mic.loop.barged_in
    assert mic.feed([SPEECH] * 40, speaking=True) == []  # exactly one BargeIn
    events = mic.feed([SILENCE] * 16, speaking=True)
    assert events == [
        SpeechEnded(
            start_ms=192.0, end_ms=(6 + 59) * 32.0, pcm=frames(0, 6 + 59 + 16), backchannel=False
        )
    ]
    assert not mic.loop.barged_in  # reset for the next utterance


def test_short_speech_over_the_assistant_is_a_backchannel():
    mic = Mic()
    events = mic.feed([SILENCE] * 6 + [SPEECH] * 12 + [SILENCE] * 16, speaking=True)
    assert events == [
        SpeechStarted(at_ms=192.0, over_assistant=True),
        CommandCheck(check_id=1, end_ms=18 * 32.0, pcm=frames(0, 6 + 12 + 3)),  # unanswered
        SpeechEnded(start_ms=192.0, end_ms=18 * 32.0, pcm=frames(0, 6 + 12 + 16), backchannel=True),
    ]
    assert not any(isinstance(e, BargeIn) for e in events)


def test_speech_without_the_assistant_never_barges_in():
    mic = Mic(NO_GUESS)
    events = mic.feed([SPEECH] * 100 + [SILENCE] * 16, speaking=False)
    assert [type(e) for e in events] == [SpeechStarted, SpeechEnded]
    assert events[1].backchannel is False
    assert events[1].end_ms == 100 * 32.0


def test_whether_the_assistant_speaks_is_taken_when_speech_starts():
    mic = Mic(NO_GUESS)
    mic.feed([SPEECH] * 2, speaking=False)
    # the assistant starts talking after the user did: not a barge-in
    events = mic.feed([SPEECH] * 30 + [SILENCE] * 16, speaking=True)
    assert [type(e) for e in events] == [SpeechStarted, SpeechEnded]
    assert events[1].backchannel is False


def test_long_silence_keeps_at_most_the_pad():
    mic = Mic(NO_GUESS)
    assert mic.feed([SILENCE] * 5000) == []
    events = mic.feed([SPEECH] * 10 + [SILENCE] * 16)
    [_, ended] = events
    assert len(ended.pcm) == (6 + 10 + 16) * FRAME_BYTES
    assert ended.pcm == frames(5000 - 6, 6 + 10 + 16)


# ---- early end (speculation) ---------------------------------------------------------------
def test_default_rules_guess_the_end_after_200_ms_of_silence():
    assert VadRules().early_silence_ms == 200.0


def test_speech_paused_after_early_silence_ms_with_the_utterance_so_far():
    mic = Mic()
    # pad 0..5, speech 6..15, then 6 x 32 = 192 ms of silence (16..21): no guess yet
    assert mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 6) == [SpeechStarted(at_ms=192.0)]
    # the 7th silent frame makes 224 ms >= 200 ms
    assert mic.feed([SILENCE]) == [
        SpeechPaused(start_ms=192.0, end_ms=16 * 32.0, pcm=frames(0, 23), pause_id=1)
    ]
    assert mic.feed([SILENCE] * 8) == []  # one guess; 15 x 32 = 480 ms < 500 ms
    # the silence rule ends it as before, with the whole utterance
    assert mic.feed([SILENCE]) == [
        SpeechEnded(start_ms=192.0, end_ms=16 * 32.0, pcm=frames(0, 32), backchannel=False)
    ]


def test_speech_resumed_before_silence_ms_then_a_new_guess_then_the_end():
    mic = Mic()
    assert mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 7) == [
        SpeechStarted(at_ms=192.0),
        SpeechPaused(start_ms=192.0, end_ms=16 * 32.0, pcm=frames(0, 23), pause_id=1),
    ]
    assert mic.feed([SILENCE] * 3) == []  # frames 23..25
    # speech again at frame 26, 320 ms into the silence (< 500 ms): the guess was wrong
    assert mic.feed([SPEECH] * 5) == [SpeechResumed(at_ms=26 * 32.0)]
    assert mic.feed([SPEECH] * 5) == []  # resumed once (frames 27..35)
    assert mic.feed([SILENCE] * 6) == []  # frames 36..41: 192 ms
    # a second pause: a second guess, with both parts of the utterance
    assert mic.feed([SILENCE]) == [
        SpeechPaused(start_ms=192.0, end_ms=36 * 32.0, pcm=frames(0, 43), pause_id=2)
    ]
    assert mic.feed([SILENCE] * 8) == []
    [ended] = mic.feed([SILENCE])  # frame 51: 16 silent frames after 35
    assert ended == SpeechEnded(
        start_ms=192.0, end_ms=36 * 32.0, pcm=frames(0, 52), backchannel=False
    )
    # both parts: the first speech (6..15), the silence between, the second (26..35)
    assert ended.pcm[6 * FRAME_BYTES : 16 * FRAME_BYTES] == frames(6, 10)
    assert ended.pcm[26 * FRAME_BYTES : 36 * FRAME_BYTES] == frames(26, 10)
    # the next utterance starts afresh: its own guess, its own end
    events = mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 16)  # speech at 58..67
    assert events == [
        SpeechStarted(at_ms=58 * 32.0),
        SpeechPaused(start_ms=58 * 32.0, end_ms=68 * 32.0, pcm=frames(52, 6 + 10 + 7), pause_id=3),
        SpeechEnded(
            start_ms=58 * 32.0, end_ms=68 * 32.0, pcm=frames(52, 6 + 10 + 16), backchannel=False
        ),
    ]


def test_a_click_is_never_guessed_to_be_an_utterance():
    mic = Mic()
    assert mic.feed([SILENCE] * 6 + [SPEECH] * 3 + [SILENCE] * 40) == []


def test_a_backchannel_candidate_is_never_guessed_to_be_an_utterance():
    mic = Mic()
    # 12 x 32 = 384 ms over the assistant (< barge_in_ms), then 224 ms of silence: no guess
    events = mic.feed([SILENCE] * 6 + [SPEECH] * 12 + [SILENCE] * 7, speaking=True)
    assert events == [
        SpeechStarted(at_ms=192.0, over_assistant=True),
        CommandCheck(1, 18 * 32.0, frames(0, 21)),
    ]
    assert mic.feed([SILENCE] * 9, speaking=True) == [
        SpeechEnded(start_ms=192.0, end_ms=18 * 32.0, pcm=frames(0, 6 + 12 + 16), backchannel=True)
    ]


def test_after_a_barge_in_a_pause_is_guessed_to_end_the_utterance():
    mic = Mic()
    events = mic.feed([SPEECH] * 19, speaking=True)  # 19 x 32 = 608 ms >= 600 ms
    assert events == [SpeechStarted(at_ms=0.0, over_assistant=True), BargeIn(at_ms=18 * 32.0)]
    assert mic.feed([SILENCE] * 6, speaking=True) == []
    assert mic.feed([SILENCE], speaking=True) == [
        SpeechPaused(start_ms=0.0, end_ms=19 * 32.0, pcm=frames(0, 26), pause_id=1)
    ]
    assert mic.feed([SILENCE] * 9, speaking=True) == [
        SpeechEnded(start_ms=0.0, end_ms=19 * 32.0, pcm=frames(0, 35), backchannel=False)
    ]


def test_speech_that_cut_an_answer_is_spotted_while_short_then_guessed_once_not_a_command():
    mic = Mic()
    assert mic.feed([SPEECH] * 8) == [SpeechStarted(at_ms=0.0)]  # not over the voice
    mic.loop.answer_cut()  # the session stopped an answer barely heard
    assert mic.feed([SPEECH] * 4 + [SILENCE] * 3) == [CommandCheck(1, 12 * 32.0, frames(0, 15))]
    assert mic.feed([SILENCE] * 3) == []  # no guess while it may be a "stop"
    assert mic.loop.command_verdict(1, False) == []  # "blue?": a real utterance now
    [guess] = mic.feed([SILENCE])
    assert isinstance(guess, SpeechPaused) and guess.guess
    [ended] = mic.feed([SILENCE] * 9)
    assert isinstance(ended, SpeechEnded) and not ended.backchannel and not ended.command


def test_speech_that_cut_an_answer_and_goes_on_past_barge_in_ms_is_not_spotted():
    mic = Mic()
    mic.feed([SPEECH] * 8)
    mic.loop.answer_cut()
    assert mic.feed([SPEECH] * 11) == []  # 608 ms: too long for a command
    assert mic.feed([SILENCE] * 6) == []
    [guess] = mic.feed([SILENCE])  # guessed at once: no spotter asked
    assert isinstance(guess, SpeechPaused)


def test_early_silence_ms_of_zero_or_at_least_silence_ms_never_guesses():
    for rules in (
        VadRules(early_silence_ms=0),
        VadRules(early_silence_ms=500.0),  # = silence_ms
        VadRules(early_silence_ms=800.0),
    ):
        mic = Mic(rules)
        events = mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 10 + [SPEECH] * 10)
        assert events == [SpeechStarted(at_ms=192.0)], rules
        assert mic.feed([SILENCE] * 16) == [
            SpeechEnded(start_ms=192.0, end_ms=36 * 32.0, pcm=frames(0, 52), backchannel=False)
        ], rules


# ---- semantic end of turn (the audio turn model decides at each pause) -----------------------
# 3 frames; the sound alone (the words' part has tests of its own below)
SEMANTIC = TurnRules(threshold=0.5, max_silence_ms=1_000.0, check_ms=96.0, words_wait_ms=0)
WORDS = TurnRules(threshold=0.5, max_silence_ms=1_000.0, check_ms=96.0, words_wait_ms=320.0)


def semantic_mic(rules: VadRules | None = None, turn: TurnRules = SEMANTIC) -> Mic:
    mic = Mic(rules)
    mic.loop = VoiceLoop(rules or VadRules(), turn)
    return mic


def paused(events: list) -> SpeechPaused:
    [pause] = [e for e in events if isinstance(e, SpeechPaused)]
    assert pause.check
    return pause


def test_semantic_asks_the_model_at_the_first_pause_and_ends_on_a_complete_verdict():
    mic = semantic_mic()
    pause = paused(mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 3))  # 96 ms silent
    assert (pause.start_ms, pause.end_ms, pause.pcm) == (192.0, 16 * 32.0, frames(0, 19))
    assert mic.feed([SILENCE]) == []  # waiting for the verdict: no silence rule at 500 ms
    assert mic.loop.turn_verdict(pause.pause_id, 0.9) == [
        SpeechEnded(start_ms=192.0, end_ms=16 * 32.0, pcm=frames(0, 20), backchannel=False)
    ]
    assert mic.feed([SILENCE] * 40) == []  # ended once


def test_semantic_an_unfinished_verdict_waits_past_the_silence_rule_for_more_speech():
    mic = semantic_mic()
    pause = paused(mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 3))
    assert mic.loop.turn_verdict(pause.pause_id, 0.2) == []
    # 700 ms of silence: the silence rule (500 ms) would have cut the user off here
    assert mic.feed([SILENCE] * 19) == []
    assert mic.feed([SPEECH] * 10) == [SpeechResumed(at_ms=38 * 32.0)]
    second = paused(mic.feed([SILENCE] * 3))  # a new pause: a new question to the model
    assert second.pause_id == pause.pause_id + 1
    assert mic.loop.turn_verdict(pause.pause_id, 0.99) == []  # the old pause's verdict: void
    [ended] = mic.loop.turn_verdict(second.pause_id, 0.99)
    assert isinstance(ended, SpeechEnded) and ended.end_ms == 48 * 32.0


def test_semantic_an_unfinished_verdict_still_ends_after_max_silence_ms():
    mic = semantic_mic()
    pause = paused(mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 3))
    assert mic.loop.turn_verdict(pause.pause_id, 0.1) == []
    assert mic.feed([SILENCE] * 28) == []  # 31 frames after the last speech: 992 < 1000 ms
    [ended] = mic.feed([SILENCE])
    assert isinstance(ended, SpeechEnded) and ended.end_ms == 16 * 32.0


def test_semantic_without_a_verdict_the_silence_rule_decides():
    mic = semantic_mic()
    pause = paused(mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 3))
    assert mic.feed([SILENCE] * 14) == []  # 17 silent frames: 544 ms, no verdict yet
    [ended] = mic.loop.turn_verdict(pause.pause_id, None)  # the model failed: 500 ms passed
    assert isinstance(ended, SpeechEnded)


def test_semantic_a_late_unfinished_verdict_past_max_silence_ends_at_once():
    mic = semantic_mic()
    pause = paused(mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 3))
    assert mic.feed([SILENCE] * 28) == []  # 31 frames: 992 ms
    assert mic.feed([SILENCE] * 2)  # past max_silence_ms without a verdict: ended anyway
    assert mic.loop.turn_verdict(pause.pause_id, 0.1) == []  # nothing left to decide


def test_semantic_a_backchannel_candidate_keeps_the_silence_rule_and_asks_nothing():
    mic = semantic_mic()
    events = mic.feed([SILENCE] * 6 + [SPEECH] * 12 + [SILENCE] * 16, speaking=True)
    assert events == [
        SpeechStarted(at_ms=192.0, over_assistant=True),
        CommandCheck(1, 18 * 32.0, frames(0, 21)),  # the spotter is asked, not the turn model
        SpeechEnded(start_ms=192.0, end_ms=18 * 32.0, pcm=frames(0, 34), backchannel=True),
    ]


def test_semantic_asks_the_model_even_when_guessing_is_off():
    mic = semantic_mic(NO_GUESS)
    pause = paused(mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 3))
    assert not pause.guess
    assert paused(semantic_mic().feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 3)).guess


def test_eagerness_high_answers_sooner_and_low_waits_longer():
    assert EAGERNESS["auto"] == EAGERNESS["medium"]
    high, medium, low = EAGERNESS["high"], EAGERNESS["medium"], EAGERNESS["low"]
    assert high.threshold < medium.threshold < low.threshold
    assert high.max_silence_ms < medium.max_silence_ms < low.max_silence_ms


# ---- short commands over the assistant's voice -------------------------------------------


def short_speech_then_check(mic: Mic) -> list:
    """384 ms of speech over the voice (a backchannel by duration), then 96 ms of silence."""
    return mic.feed([SILENCE] * 6 + [SPEECH] * 12 + [SILENCE] * 3, speaking=True)


def test_short_speech_over_the_voice_is_spotted_after_command_check_ms_of_silence():
    mic = Mic()
    events = mic.feed([SILENCE] * 6 + [SPEECH] * 12 + [SILENCE] * 2, speaking=True)
    assert events == [SpeechStarted(at_ms=192.0, over_assistant=True)]  # 64 ms of silence: not yet
    assert mic.feed([SILENCE], speaking=True) == [
        CommandCheck(check_id=1, end_ms=18 * 32.0, pcm=frames(0, 21))
    ]
    assert mic.feed([SILENCE] * 4, speaking=True) == []  # asked once per silence


def test_a_command_interrupts_at_once_and_ends_as_a_command_not_a_turn():
    mic = Mic()  # default rules: guessing on, so a real utterance would be guessed at 200 ms
    assert short_speech_then_check(mic)[-1] == CommandCheck(1, 18 * 32.0, frames(0, 21))
    assert mic.loop.command_verdict(1, True) == [BargeIn(at_ms=20 * 32.0)]
    assert mic.loop.barged_in
    # no guess at 200 ms: a bare command is not answered; the silence rule ends it
    assert mic.feed([SILENCE] * 12, speaking=True) == []
    assert mic.feed([SILENCE], speaking=True) == [
        SpeechEnded(
            start_ms=192.0,
            end_ms=18 * 32.0,
            pcm=frames(0, 6 + 12 + 16),
            backchannel=False,
            command=True,
        )
    ]
    assert not mic.loop.barged_in  # reset for the next utterance


def test_not_a_command_or_no_verdict_leaves_the_backchannel_rule():
    for verdict in (False, None):
        mic = Mic()
        short_speech_then_check(mic)
        assert mic.loop.command_verdict(1, verdict) == []
        [ended] = mic.feed([SILENCE] * 13, speaking=True)
        assert isinstance(ended, SpeechEnded)
        assert ended.backchannel and not ended.command


def test_a_verdict_on_speech_that_went_on_is_void_and_the_next_silence_asks_again():
    mic = Mic(NO_GUESS)
    short_speech_then_check(mic)
    assert mic.feed([SPEECH] * 2, speaking=True) == []  # 448 ms of speech: still short
    assert mic.loop.command_verdict(1, True) == []  # about words the user went on from
    assert mic.feed([SILENCE] * 3, speaking=True) == [CommandCheck(2, 23 * 32.0, frames(0, 26))]
    assert mic.loop.command_verdict(1, True) == []  # an old check's answer
    assert mic.loop.command_verdict(2, True) == [BargeIn(at_ms=25 * 32.0)]


def test_a_verdict_after_the_utterance_ended_is_void():
    mic = Mic()
    short_speech_then_check(mic)
    [ended] = mic.feed([SILENCE] * 13, speaking=True)
    assert ended.backchannel
    assert mic.loop.command_verdict(1, True) == []


def test_speech_after_a_command_makes_it_a_barged_in_utterance_and_a_turn():
    mic = Mic()
    short_speech_then_check(mic)
    assert mic.loop.command_verdict(1, True) == [BargeIn(at_ms=20 * 32.0)]
    assert mic.feed([SILENCE] * 3 + [SPEECH] * 20, speaking=True) == []  # "wait, ... Paris"
    events = mic.feed([SILENCE] * 16, speaking=True)
    assert [type(e) for e in events] == [SpeechPaused, SpeechEnded]  # guessed, then ended
    assert not events[-1].backchannel and not events[-1].command
    assert mic.loop.command_verdict(1, True) == []


def test_speech_not_over_the_voice_or_after_a_barge_in_is_never_spotted():
    mic = Mic(NO_GUESS)
    assert [type(e) for e in mic.feed([SPEECH] * 12 + [SILENCE] * 16)] == [
        SpeechStarted,
        SpeechEnded,
    ]
    mic = Mic(NO_GUESS)
    events = mic.feed([SPEECH] * 19 + [SILENCE] * 16, speaking=True)  # barged in by duration
    assert [type(e) for e in events] == [SpeechStarted, BargeIn, SpeechEnded]


def test_command_check_ms_of_zero_never_spots():
    mic = Mic(VadRules(command_check_ms=0))
    events = mic.feed([SILENCE] * 6 + [SPEECH] * 12 + [SILENCE] * 16, speaking=True)
    assert [type(e) for e in events] == [SpeechStarted, SpeechEnded]


def test_semantic_a_bare_command_ends_on_the_silence_rule_without_asking_the_model():
    mic = Mic()
    mic.loop.turn = EAGERNESS["low"]  # the model would wait up to 4 s
    short_speech_then_check(mic)
    mic.loop.command_verdict(1, True)
    events = mic.feed([SILENCE] * 13, speaking=True)
    assert [type(e) for e in events] == [SpeechEnded]  # no SpeechPaused asking the model
    assert events[0].command


# ---- semantic end of turn: the words of the guess weigh in ---------------------------------


def words_mic() -> tuple[Mic, SpeechPaused]:
    """Speech, then 96 ms of silence: the model is asked and a guess starts."""
    mic = semantic_mic(turn=WORDS)
    pause = paused(mic.feed([SILENCE] * 6 + [SPEECH] * 10 + [SILENCE] * 3))
    assert pause.guess
    return mic, pause


def test_words_a_complete_sound_waits_for_the_words_and_finished_words_end_the_turn():
    mic, pause = words_mic()
    assert mic.loop.turn_verdict(pause.pause_id, 0.9) == []  # complete by its sound: wait
    assert mic.feed([SILENCE] * 2) == []
    [ended] = mic.loop.words_verdict(pause.pause_id, False)  # "... the train station?"
    assert isinstance(ended, SpeechEnded) and ended.end_ms == 16 * 32.0


def test_words_that_stop_mid_sentence_keep_listening_until_max_silence():
    mic, pause = words_mic()
    assert mic.loop.turn_verdict(pause.pause_id, 0.9) == []
    assert mic.loop.words_verdict(pause.pause_id, True) == []  # "... how to get to the"
    # 700 ms of silence: the sound alone would have ended it at 96 ms
    assert mic.feed([SILENCE] * 19) == []
    assert mic.feed([SPEECH] * 5) == [SpeechResumed(at_ms=38 * 32.0)]  # "... train station"
    second = paused(mic.feed([SILENCE] * 3))
    assert mic.loop.words_verdict(second.pause_id, False) == []  # before the model: kept
    [ended] = mic.loop.turn_verdict(second.pause_id, 0.9)
    assert isinstance(ended, SpeechEnded) and ended.end_ms == 43 * 32.0


def test_words_unfinished_before_the_model_answers_still_hold_the_turn():
    mic, pause = words_mic()
    assert mic.loop.words_verdict(pause.pause_id, True) == []
    assert mic.loop.turn_verdict(pause.pause_id, 0.99) == []
    assert mic.feed([SILENCE] * 28) == []  # 96 + 28 x 32 = 992 ms < 1000
    [ended] = mic.feed([SILENCE])
    assert isinstance(ended, SpeechEnded)


def test_words_that_never_come_end_the_turn_after_words_wait_ms():
    mic, pause = words_mic()
    assert mic.loop.turn_verdict(pause.pause_id, 0.9) == []
    assert mic.feed([SILENCE] * 9) == []  # 96 + 288 = 384 ms < 96 + 320
    [ended] = mic.feed([SILENCE])  # 416 ms: the words' wait is over
    assert isinstance(ended, SpeechEnded)


def test_words_none_coming_end_a_complete_turn_at_once():
    mic, pause = words_mic()
    assert mic.loop.turn_verdict(pause.pause_id, 0.9) == []
    [ended] = mic.loop.words_verdict(pause.pause_id, None)  # the guess was refused
    assert isinstance(ended, SpeechEnded)


def test_words_of_an_old_pause_are_void_and_the_model_alone_ends_without_a_guess():
    mic, pause = words_mic()
    mic.feed([SPEECH] * 3)
    second = paused(mic.feed([SILENCE] * 3))
    assert mic.loop.words_verdict(pause.pause_id, True) == []  # void: about the first pause
    assert mic.loop.turn_verdict(second.pause_id, 0.9) == []  # waits for the second's words
    [ended] = mic.loop.words_verdict(second.pause_id, False)
    assert isinstance(ended, SpeechEnded)
    no_guess = semantic_mic(NO_GUESS, turn=WORDS)  # no guess, no words to wait for
    pause = paused(no_guess.feed([SPEECH] * 10 + [SILENCE] * 3))
    assert not pause.guess
    [ended] = no_guess.loop.turn_verdict(pause.pause_id, 0.9)
    assert isinstance(ended, SpeechEnded)


# ---- interim transcripts ------------------------------------------------------------------
def so_far(events) -> list[SpeechSoFar]:
    return [e for e in events if isinstance(e, SpeechSoFar)]


def test_interim_hands_on_the_utterance_so_far_every_interim_ms_of_speech():
    mic = Mic(VadRules(interim_ms=320.0))  # 10 frames
    mic.loop.interim = True
    mic.feed([SILENCE] * 5)
    events = mic.feed([SPEECH] * 25)
    # speech from frame 5: the 10th frame of it (15) and the 20th (25) hand it on
    assert [(e.utterance, e.start_ms, e.end_ms) for e in so_far(events)] == [
        (1, 160.0, 480.0),
        (1, 160.0, 800.0),
    ]
    # what has been heard so far, the leading pad included (the pad is 6 frames: 200 ms)
    assert so_far(events)[1].pcm == frames(0, 25)
    assert mic.loop.speaking_utterance == 1
    # silence hands nothing on; the next utterance is another one
    assert so_far(mic.feed([SILENCE] * 40)) == []
    assert mic.loop.speaking_utterance is None
    assert [e.utterance for e in so_far(mic.feed([SPEECH] * 10))] == [2]


def test_no_interim_unless_asked_nor_for_talk_over_the_assistant():
    mic = Mic(VadRules(interim_ms=320.0))
    assert so_far(mic.feed([SPEECH] * 40)) == []  # not asked for
    mic.feed([SILENCE] * 40)
    mic.loop.interim = True
    # speech over the voice, not (yet) barged in: a backchannel candidate, maybe dropped
    events = mic.feed([SPEECH] * 15, speaking=True)
    assert so_far(events) == []
    # once it barges in (600 ms: its 19th frame, 98) it is a real utterance: its words come
    events = mic.feed([SPEECH] * 15, speaking=True)
    assert BargeIn(98 * FRAME_MS) in events
    assert [e.end_ms for e in so_far(events)] == [99 * FRAME_MS, 109 * FRAME_MS]


def test_no_interim_during_a_pause():
    mic = Mic(VadRules(interim_ms=320.0, early_silence_ms=200.0, silence_ms=2_000.0))
    mic.loop.interim = True
    mic.feed([SPEECH] * 9)
    paused = mic.feed([SILENCE] * 30)
    assert any(isinstance(e, SpeechPaused) for e in paused) and so_far(paused) == []
    # speech again: the interim counts from where the last one left (frame 0: none yet)
    resumed = mic.feed([SPEECH] * 2)
    assert [e.end_ms for e in so_far(resumed)] == [40 * FRAME_MS]

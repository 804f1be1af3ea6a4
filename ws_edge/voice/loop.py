"""The voice loop's end-pointing on a live microphone stream (pure: no model, no loop).

The shell scores each 32 ms frame with Silero VAD; this decides what the scores mean:
- speech starts when a frame reaches `threshold`, and counts once it lasts `min_speech_ms`
  (a click is not a turn); it ends after `silence_ms` below `threshold - 0.15` (hysteresis,
  so a wobbling score does not chop words);
- the utterance's audio (with `pad_ms` before it) becomes the turn; before speech only the
  last `pad_ms` is kept, so an open microphone holds no more than that between turns;
- an utterance longer than `max_utterance_ms` ends there (a stream that never stops talking
  still gets answered and holds bounded memory);
- early end (speculation): after `early_silence_ms` of silence the utterance so far is
  handed on at once (`SpeechPaused`), so transcription and the answer start while the
  silence rule is still waiting; speech that resumes before `silence_ms` withdraws it
  (`SpeechResumed`), and the whole utterance is handed on at its real end instead. That
  takes ~300 ms off the time to the first answer audio at the price of some wasted work
  when a user pauses mid-sentence;
- semantic end of turn (`semantic_vad`, when the loop has `TurnRules`): at the first pause
  (`TurnRules.check_ms` of silence) `SpeechPaused` asks the shell for the audio turn model's
  verdict (`turn_verdict`): a probability of completion at or over `threshold` ends the
  utterance; under it, only `max_silence_ms` of silence does (the user pauses mid-thought
  and is not cut off). When a guess started at that pause, its words weigh in too
  (`words_verdict`, from its transcript): the model's "complete" waits for them (at most
  `words_wait_ms`), and words that stop mid-sentence ("… get to the") make the pause an
  unfinished one. No verdict (the model failed) falls back to the silence rule. Speech over
  the assistant's voice that has not barged in stays on the silence rule;
- barge-in: speech over the assistant's voice interrupts it once it lasts `barge_in_ms`.
  Shorter speech over the voice ("mm-hm", "yeah", ~200-500 ms) is a backchannel: it neither
  interrupts nor becomes a turn. Duration is the rule because it is known while the user is
  still talking;
- short commands: a short "stop", "wait" or "no" is as short as a backchannel. After
  `command_check_ms` of silence, short speech over the voice is handed to a keyword
  spotter (`CommandCheck`; answer with `command_verdict`): a command interrupts at once
  (`BargeIn`) and, if the user says nothing more, ends as a command, not a turn
  (`SpeechEnded.command`); speech that goes on makes it a barged-in utterance like any other;
- interim transcripts (`interim`, the client's choice): every `interim_ms` of speech in a
  real utterance the audio so far is handed on (`SpeechSoFar`) to be transcribed while the
  user is still talking, so the client can show the words as they come.
"""

from __future__ import annotations

from dataclasses import dataclass

SAMPLE_RATE = 16_000
FRAME_SAMPLES = 512
FRAME_BYTES = FRAME_SAMPLES * 2
FRAME_MS = 1000 * FRAME_SAMPLES / SAMPLE_RATE  # 32 ms


@dataclass(frozen=True, slots=True)
class VadRules:
    threshold: float = 0.5
    silence_ms: float = 500.0
    min_speech_ms: float = 250.0
    barge_in_ms: float = 600.0
    pad_ms: float = 200.0
    max_utterance_ms: float = 30_000.0
    early_silence_ms: float = 200.0  # 0 (or >= silence_ms): no speculation
    command_check_ms: float = 96.0  # silence before short speech over the voice is spotted; 0: off
    # the session's: speech that starts before an answer has played this long is the user
    # going on with their turn (it stops the answer), not talk over the assistant's voice
    barge_in_grace_ms: float = 1_000.0
    interim_ms: float = 1_000.0  # speech between two interim transcripts (when asked for)


@dataclass(frozen=True, slots=True)
class TurnRules:
    """End of turn decided by the audio turn model at each pause (`semantic_vad`)."""

    threshold: float = 0.5  # P(complete) from which the pause ends the turn
    max_silence_ms: float = 2_000.0  # a turn the model calls unfinished ends after this anyway
    check_ms: float = 200.0  # silence before the model is asked
    # the model's "complete" waits this long for the words of the guess started at the pause
    # (`words_verdict`); words that stop mid-sentence make it an unfinished pause. 0: sound only
    words_wait_ms: float = 1_000.0


# How eager a `semantic_vad` session is to answer: a lower bar for the model's verdict and a
# shorter wait when it says the user is not done. "auto" is "medium".
EAGERNESS: dict[str, TurnRules] = {
    "high": TurnRules(threshold=0.3, max_silence_ms=1_000.0),
    "medium": TurnRules(),
    "auto": TurnRules(),
    "low": TurnRules(threshold=0.7, max_silence_ms=4_000.0),
}


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    at_ms: float  # into the stream
    over_assistant: bool = False  # it began over the assistant's voice (barge-in rules apply)


@dataclass(frozen=True, slots=True)
class BargeIn:
    at_ms: float


@dataclass(frozen=True, slots=True)
class SpeechPaused:
    """Silence long enough to guess the utterance is over: `pcm` is the utterance so far.
    `check` (semantic end of turn): answer with `turn_verdict(pause_id, ...)`."""

    start_ms: float
    end_ms: float
    pcm: bytes
    pause_id: int = 0
    check: bool = False
    guess: bool = True  # answering on a guess is on: start the turn, unseen


@dataclass(frozen=True, slots=True)
class CommandCheck:
    """Short speech over the assistant's voice, then silence: is `pcm` (the utterance, with
    its leading pad) a command? Answer with `command_verdict(check_id, ...)`."""

    check_id: int
    end_ms: float
    pcm: bytes


@dataclass(frozen=True, slots=True)
class SpeechSoFar:
    """The user is still speaking: `pcm` is the utterance so far (with its leading pad), to
    transcribe for the client now. `utterance` tells the loop's utterances apart: words that
    come back after it ended are stale (its turn's transcript says them)."""

    utterance: int
    start_ms: float
    end_ms: float
    pcm: bytes


@dataclass(frozen=True, slots=True)
class SpeechResumed:
    """The user spoke again before the silence rule ended the utterance: the guess was wrong."""

    at_ms: float


@dataclass(frozen=True, slots=True)
class SpeechEnded:
    start_ms: float
    end_ms: float
    pcm: bytes  # the utterance, PCM16 16 kHz, with its leading pad
    backchannel: bool  # short speech over the assistant's voice: neither a turn nor a barge-in
    command: bool = False  # a short command that interrupted the voice: not a turn either

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


VoiceEvent = (
    SpeechStarted
    | BargeIn
    | SpeechPaused
    | SpeechResumed
    | SpeechEnded
    | CommandCheck
    | SpeechSoFar
)


class VoiceLoop:
    def __init__(self, rules: VadRules, turn: TurnRules | None = None) -> None:
        self.rules = rules
        self.turn = turn  # semantic end of turn, or None: the silence rule alone
        self.interim = False  # hand on the utterance so far every `interim_ms` of speech
        self._utterances = 0  # utterances begun so far (their ids)
        self._interim_from = 0  # frame from which the next interim's speech is counted
        self._pauses = 0  # SpeechPaused events so far (their ids)
        self._silence_limit: float | None = None  # set by a verdict for this utterance
        self._words: bool | None = None  # the guess's words stop mid-sentence (None: not in)
        self._words_pending = False  # a guess's words are expected for the current pause
        self._complete_waiting = False  # the model said complete; waiting for the words
        self._pending = bytearray()  # audio not scored yet (less than a frame, or waiting)
        self._audio = bytearray()  # the utterance so far, or the pre-speech pad
        self._frames = 0  # frames scored since the stream began
        self._speech_start: int | None = None  # frame where speech began
        self._last_speech = 0  # last frame scored as speech
        self._confirmed = False  # lasted min_speech_ms: announced
        self._barged = False
        self._over_assistant = False
        self._paused = False  # a SpeechPaused is out for the current utterance
        self._checks = 0  # CommandCheck events so far (their ids)
        self._command_asked = False  # a CommandCheck is out for the current silence
        self._command = False  # the utterance so far is a command that interrupted the voice
        # it stopped an answer as it began (`answer_cut`): while short, it may be a command,
        # so it is spotted before it may be guessed to be a turn
        self._cut_check = False
        self._received_ms = 0.0  # audio appended since the stream began, in stream time
        self._received_at_ms = 0.0  # wall clock of the last append that said when (0: never)

    def append(self, pcm: bytes, *, at_ms: float = 0.0) -> bytes:
        """Microphone audio in (`at_ms`: the wall clock it arrived at, for `heard_at_ms`);
        the whole frames to score now (their bytes, in order)."""
        self._received_ms += 1000 * len(pcm) / 2 / SAMPLE_RATE
        if at_ms:
            self._received_at_ms = at_ms
        self._pending += pcm
        whole = len(self._pending) - len(self._pending) % FRAME_BYTES
        frames, self._pending = bytes(self._pending[:whole]), self._pending[whole:]
        return frames

    def heard_at_ms(self, stream_ms: float) -> float:
        """The wall clock at which the audio `stream_ms` into the stream arrived, reckoned
        back from the last arrival (a microphone streams in real time); 0 when no append
        said when. A turn's end of speech on the clock: the end-of-turn wait is measured from
        it, not from the moment the silence rule or the turn model decided."""
        if not self._received_at_ms:
            return 0.0
        return self._received_at_ms - max(0.0, self._received_ms - stream_ms)

    def scored(
        self, frames: bytes, probs: list[float], *, assistant_speaking: bool
    ) -> list[VoiceEvent]:
        """The frames `append` returned, with their speech probabilities."""
        events: list[VoiceEvent] = []
        rules = self.rules
        for i, prob in enumerate(probs):
            frame = frames[i * FRAME_BYTES : (i + 1) * FRAME_BYTES]
            self._audio += frame
            n = self._frames
            self._frames += 1
            if self._speech_start is None:
                if prob >= rules.threshold:
                    self._begin(n, over_assistant=assistant_speaking)
                else:
                    keep = int(rules.pad_ms / FRAME_MS) * FRAME_BYTES
                    del self._audio[: max(0, len(self._audio) - keep)]
                continue
            if prob >= rules.threshold - 0.15:
                self._last_speech = n
                # the user goes on: a pending spotter verdict is void, a command is a turn now
                self._command_asked = self._command = False
                if self._paused:
                    self._paused, self._silence_limit = False, None  # the next pause is new
                    self._forget_words()
                    events.append(SpeechResumed(n * FRAME_MS))
            spoken_ms = (self._last_speech - self._speech_start + 1) * FRAME_MS
            if not self._confirmed and spoken_ms >= rules.min_speech_ms:
                self._confirmed = True
                events.append(SpeechStarted(self._speech_start * FRAME_MS, self._over_assistant))
            if self._cut_check and spoken_ms >= rules.barge_in_ms:
                self._cut_check = False  # too long for a command: a real utterance
            over = self._confirmed and self._over_assistant and not self._barged
            if over and spoken_ms >= rules.barge_in_ms:
                self._barged = True
                events.append(BargeIn(n * FRAME_MS))
            events.extend(self._so_far(n))
            silent_ms = (n - self._last_speech) * FRAME_MS
            too_long = (n - self._speech_start + 1) * FRAME_MS >= rules.max_utterance_ms
            if silent_ms >= self._silence_limit_ms() or too_long:
                events.extend(self._end())
            elif self._may_check_command(over or self._cut_check, silent_ms):
                self._command_asked = True
                self._checks += 1
                end_ms = (self._last_speech + 1) * FRAME_MS
                events.append(CommandCheck(self._checks, end_ms, bytes(self._audio)))
            elif self._may_pause() and silent_ms >= self._pause_ms():
                self._paused = True
                self._pauses += 1
                semantic = self._semantic()
                turn = self.turn
                self._words_pending = (
                    semantic and self._may_guess() and turn is not None and turn.words_wait_ms > 0
                )
                events.append(
                    SpeechPaused(
                        start_ms=self._speech_start * FRAME_MS,
                        end_ms=(self._last_speech + 1) * FRAME_MS,
                        pcm=bytes(self._audio),
                        pause_id=self._pauses,
                        check=semantic,
                        guess=self._may_guess(),
                    )
                )
        return events

    def _begin(self, n: int, *, over_assistant: bool) -> None:
        """Speech starts at frame `n`: a new utterance."""
        self._speech_start = self._last_speech = self._interim_from = n
        self._utterances += 1
        self._over_assistant = over_assistant

    def turn_verdict(self, pause_id: int, probability: float | None) -> list[VoiceEvent]:
        """The turn model's answer to `SpeechPaused(pause_id, check=True)`: the probability
        that the user finished, or None when the model failed (then the silence rule
        decides). A verdict on a pause the user has since spoken after is void."""
        if not self._paused or pause_id != self._pauses or self._speech_start is None:
            return []
        turn = self.turn
        silent_ms = (self._frames - 1 - self._last_speech) * FRAME_MS
        if probability is None or turn is None:
            self._silence_limit = self.rules.silence_ms
        elif probability < turn.threshold or self._words:
            self._silence_limit = turn.max_silence_ms
        elif self._words_pending:  # complete by its sound: do the words agree?
            self._complete_waiting = True
            self._silence_limit = min(turn.max_silence_ms, silent_ms + turn.words_wait_ms)
        else:
            return self._end()
        if silent_ms >= self._silence_limit:
            return self._end()
        return []

    def words_verdict(self, pause_id: int, unfinished: bool | None) -> list[VoiceEvent]:
        """The words of the guess started at `SpeechPaused(pause_id)`: whether they stop
        mid-sentence, or None when none will come (the guess was refused or failed). Words
        that stop mid-sentence make the pause an unfinished one (only `max_silence_ms` of
        silence ends it); otherwise a "complete" the model gave ends the utterance now."""
        if not self._paused or pause_id != self._pauses or self._speech_start is None:
            return []
        self._words_pending = False
        self._words = unfinished
        turn = self.turn
        if not self._complete_waiting or turn is None:
            return []  # the model has not answered: its verdict reads the words
        self._complete_waiting = False
        if not unfinished:
            return self._end()
        self._silence_limit = turn.max_silence_ms
        return []

    def _forget_words(self) -> None:
        self._words, self._words_pending, self._complete_waiting = None, False, False

    def command_verdict(self, check_id: int, command: bool | None) -> list[VoiceEvent]:
        """The keyword spotter's answer to `CommandCheck(check_id)`: a command interrupts the
        voice now (`BargeIn`); not one, or no answer (None), leaves the duration rule (an
        utterance that cut an answer is then a real one). A verdict on speech that has since
        gone on, or ended, is void."""
        if check_id != self._checks or not self._command_asked:
            return []
        if not command:
            self._cut_check = False  # an utterance that cut an answer is a real one now
            return []
        if self._speech_start is None or self._barged:
            return []
        self._barged = self._command = True
        return [BargeIn((self._frames - 1) * FRAME_MS)]

    def answer_cut(self) -> None:
        """The current utterance stopped an answer the user had barely heard (the session's
        grace): it is the user going on, a turn, unless it is a short command ("stop" is
        not a question to answer), which the spotter is asked first, as over the voice."""
        if self._speech_start is not None and not self._barged and self.rules.command_check_ms:
            self._cut_check = True

    def _so_far(self, n: int) -> list[VoiceEvent]:
        """The utterance so far, when interim transcripts are asked for, frame `n` is speech
        of a real utterance (announced, not a backchannel candidate, not paused), and
        `interim_ms` of it has passed since the last one."""
        if not self.interim or not self._confirmed or self._paused or self._last_speech != n:
            return []
        if not self._real_utterance() or self._speech_start is None:
            return []
        if (n + 1 - self._interim_from) * FRAME_MS < self.rules.interim_ms:
            return []
        self._interim_from = n + 1
        start_ms, end_ms = self._speech_start * FRAME_MS, (n + 1) * FRAME_MS
        return [SpeechSoFar(self._utterances, start_ms, end_ms, bytes(self._audio))]

    def _may_check_command(self, over: bool, silent_ms: float) -> bool:
        """Short speech over the voice (announced, not barged in), `command_check_ms` of
        silence after it, not yet asked about for this silence."""
        check_ms = self.rules.command_check_ms
        if not over or self._barged or self._command_asked:
            return False
        return 0 < check_ms <= silent_ms

    def _semantic(self) -> bool:
        """The turn model decides this utterance: semantic mode, and a real utterance (a
        backchannel candidate over the assistant's voice keeps the silence rule)."""
        return self.turn is not None and self._real_utterance()

    def _real_utterance(self) -> bool:
        """Not a backchannel candidate (not over the assistant's voice, or barged in), nor a
        bare command (no guess, no turn model: it ends on the silence rule)."""
        over = self._over_assistant and not self._barged
        return not over and not self._command and not self._cut_check

    def _silence_limit_ms(self) -> float:
        if self._silence_limit is not None:
            return self._silence_limit
        if self.turn is not None and self._semantic():
            return self.turn.max_silence_ms  # until the verdict (it comes in ~0.1 s)
        return self.rules.silence_ms

    def _pause_ms(self) -> float:
        if self.turn is not None and self._semantic():
            return self.turn.check_ms
        return self.rules.early_silence_ms

    def _may_guess(self) -> bool:
        """Answering on a guess is on (a deployment setting, `early_silence_ms` > 0)."""
        rules = self.rules
        return 0 < rules.early_silence_ms < rules.silence_ms or (
            self.turn is not None and rules.early_silence_ms > 0
        )

    def _may_pause(self) -> bool:
        """A pause is reported once per silence, on a real utterance (announced, not a
        backchannel candidate), when something uses it: a guess or the turn model."""
        if not self._confirmed or self._paused or not self._real_utterance():
            return False
        return self.turn is not None or self._may_guess()

    @property
    def speaking_utterance(self) -> int | None:
        """The id of the utterance the user is in (its `SpeechSoFar`s'), None between them."""
        return self._utterances if self._speech_start is not None else None

    @property
    def barged_in(self) -> bool:
        """The current utterance interrupted the assistant."""
        return self._barged

    def _end(self) -> list[VoiceEvent]:
        start = self._speech_start
        assert start is not None
        ended = SpeechEnded(
            start_ms=start * FRAME_MS,
            end_ms=(self._last_speech + 1) * FRAME_MS,
            pcm=bytes(self._audio),
            backchannel=self._over_assistant and not self._barged,
            command=self._command,
        )
        self._audio.clear()
        self._speech_start = None
        self._paused, self._silence_limit = False, None
        self._command_asked = self._command = self._cut_check = False
        self._forget_words()
        confirmed, self._confirmed, self._barged = self._confirmed, False, False
        if not confirmed:
            return []  # a click: never announced, nothing to report
        return [ended]

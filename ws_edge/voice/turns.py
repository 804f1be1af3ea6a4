"""The voice half of the session: speech settings, listening to the client's audio, turns
started on a guess that the user stopped talking (confirmed or withdrawn), barge-in that
truncates the spoken answer where the user cut in, and the truthful history it leaves.

A mixin of `ws_edge.session.Session`: it works on the session's routes and voice loop; the
session owns the state and the text half of the protocol.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import msgspec

from schemas.events import (
    AnyEvent,
    InputTranscribed,
    SentenceEndJudged,
    SpeechSettings,
    Truncation,
    TurnCompleted,
    TurnTruncated,
)
from ws_edge.actions import (
    Action,
    CheckCommand,
    CheckTurn,
    ConfirmTurn,
    DetectSpeech,
    DropAudio,
    PublishTruncation,
    RequestCancel,
    Send,
    TranscribeSoFar,
)
from ws_edge.errors import (
    AuthError,
    EdgeError,
    InvalidMessage,
)
from ws_edge.media import decode_base64
from ws_edge.messages import (
    AppendAudio,
    AudioPart,
    CreateTurn,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptInterim,
    ResponseAudioDone,
    ResponseTruncated,
    SessionUpdate,
    SessionUpdated,
    SpeechOptions,
    TurnDetection,
)
from ws_edge.route import Route
from ws_edge.tools import offered_tools
from ws_edge.voice.interim import Interim
from ws_edge.voice.loop import (
    EAGERNESS,
    BargeIn,
    CommandCheck,
    SpeechEnded,
    SpeechPaused,
    SpeechResumed,
    SpeechSoFar,
    SpeechStarted,
    VoiceEvent,
    VoiceLoop,
)
from ws_edge.voice.unfinished import guess_unfinished, unreadable


class VoiceTurns:
    def _update(self, msg: SessionUpdate) -> list[Action]:
        actions: list[Action] = []
        if msg.speech is not msgspec.UNSET:
            self._speech = self._speech_settings(msg.speech)
        if msg.turn_detection is not msgspec.UNSET:
            detection = msg.turn_detection
            if detection != self._detection:
                actions += self._withdraw()  # a guess of the old loop is void
            if detection is not None and (
                self._detection is None or detection.stream_id != self._detection.stream_id
            ):
                self._voice_loop = VoiceLoop(self._limits.vad)
                self._audio.clear(detection.stream_id)
            elif detection is None:
                self._voice_loop = None
            if detection is not None and self._voice_loop is not None:
                semantic = detection.type == "semantic_vad"
                self._voice_loop.turn = EAGERNESS[detection.eagerness] if semantic else None
                self._voice_loop.interim = detection.interim_transcripts
            self._detection = detection
        if msg.tools is not msgspec.UNSET or msg.tool_choice is not msgspec.UNSET:
            tools = self._tools if msg.tools is msgspec.UNSET else list(msg.tools or [])
            choice = self._tool_choice if msg.tool_choice is msgspec.UNSET else msg.tool_choice
            # checked as a turn's are, now: a bad tool is refused here, not per turn
            offered_tools(
                tools,
                choice,
                max_schema_bytes=self._limits.max_schema_bytes,
                tenant=self.principal.tenant_id if self.principal is not None else "",
                server_tools=self._server_tools,
            )
            self._tools, self._tool_choice = tools, choice
        speech = SpeechOptions(self._speech.voice) if self._speech is not None else None
        updated = SessionUpdated(
            speech,
            self._detection,
            list(self._limits.voices),
            tools=self._tools,
            tool_choice=self._tool_choice,
        )
        return [*actions, Send(updated)]

    def _speech_settings(self, options: SpeechOptions | None) -> SpeechSettings | None:
        if options is None:
            return None
        voice = options.voice.strip().lower()
        if voice not in self._limits.voices:
            raise InvalidMessage(
                f"unknown voice {options.voice!r}; this deployment offers "
                f"{', '.join(self._limits.voices)}",
                code="unknown_voice",
            )
        return SpeechSettings(voice=voice)

    def _interrupt(
        self, turn_id: str, route: Route, audio_end_ms: float | None, reason: str
    ) -> list[Action]:
        """Stop an answer everywhere and keep in the history what the user heard."""
        if route.interrupted:
            return []
        route.interrupted = True
        self._played.pop(turn_id, None)
        actions: list[Action] = [DropAudio(turn_id)]
        if not (route.text_done and route.audio_done):  # generation or speech still running
            actions.append(RequestCancel(turn_id, route.conversation_id, reason))
        if route.speech and not route.audio_done:
            route.audio_done = True
            actions.append(Send(ResponseAudioDone(turn_id, "interrupted")))
            actions += self._delivered(route, turn_id, "interrupted")
        if route.speech and self.principal is not None:
            played = self._played_ms(route) if audio_end_ms is None else audio_end_ms
            played = min(played, route.timeline.total_ms)
            truncation = Truncation(turn_id, route.timeline.heard(played), round(played, 3))
            self._truncations.setdefault(route.conversation_id, []).append(truncation)
            actions.append(
                Send(ResponseTruncated(turn_id, truncation.audio_end_ms, truncation.text))
            )
            actions += self._record_truncation(route, truncation, reason)
        if route.text_done:
            self._close(turn_id)
        return actions

    def _played_ms(self, route: Route) -> float:
        """The edge's estimate of how far playback got: since the first audio left, real time
        (a client plays at 1x), never past the audio it was sent."""
        if route.first_audio_ms is None:
            return 0.0
        return max(0.0, self._clock_ms() - route.first_audio_ms)

    def _speaking(self) -> list[tuple[str, Route]]:
        """Answers whose voice the user may be hearing now: audio still coming, or sent and
        (by the real-time estimate) still playing."""
        speaking = [
            (turn_id, r)
            for turn_id, r in self._routes.items()
            if r.speech and not (r.interrupted or r.audio_done or r.speculative or r.withdrawn)
        ]
        self._forget_played()
        return speaking + list(self._played.items())

    def _audible(self) -> list[tuple[str, Route]]:
        """Answers the user has been hearing for the grace (`VadRules.barge_in_grace_ms`):
        speech over one of them is talk over the assistant (a backchannel, a command or a
        barge-in). Before that, speech is the user going on with their turn."""
        grace = self._limits.vad.barge_in_grace_ms
        return [
            (t, r)
            for t, r in self._speaking()
            if r.first_audio_ms is not None and self._played_ms(r) >= grace
        ]

    def _barge_in(self) -> list[Action]:
        """Stop every answer the user may be hearing, keeping what they heard of it."""
        actions: list[Action] = []
        for turn_id, route in self._speaking():
            actions += self._interrupt(turn_id, route, None, "barge_in")
        return actions

    def _forget_played(self) -> None:
        """Drop the answers that (by the real-time estimate) finished playing: nothing is
        left of them to cut."""
        for turn_id, r in list(self._played.items()):
            if r.first_audio_ms is None or self._played_ms(r) >= r.timeline.total_ms:
                del self._played[turn_id]

    def _listen(self, msg: AppendAudio) -> list[Action]:
        assert self._voice_loop is not None
        pcm = decode_base64(msg.data, "audio.append")
        if len(pcm) % 2:
            raise InvalidMessage("audio.append: PCM16 audio has an even number of bytes")
        frames = self._voice_loop.append(pcm, at_ms=self._clock_ms())
        return [DetectSpeech(msg.stream_id, frames)] if frames else []

    def voice_activity(self, stream_id: str, frames: bytes, probs: list[float]) -> list[Action]:
        """Scores of the frames a `DetectSpeech` asked for: speech starts, barge-ins, turns."""
        return self._on_loop(
            stream_id,
            lambda loop: loop.scored(frames, probs, assistant_speaking=bool(self._audible())),
        )

    def turn_verdict(
        self, stream_id: str, pause_id: int, probability: float | None
    ) -> list[Action]:
        """The turn model's answer to a `CheckTurn` (None: no verdict, silence decides)."""
        return self._on_loop(stream_id, lambda loop: loop.turn_verdict(pause_id, probability))

    def command_verdict(self, stream_id: str, check_id: int, command: bool | None) -> list[Action]:
        """The keyword spotter's answer to a `CheckCommand` (None: no verdict, the duration
        rule decides)."""
        return self._on_loop(stream_id, lambda loop: loop.command_verdict(check_id, command))

    @property
    def wants_interim(self) -> bool:
        """The client asked for interim transcripts of its microphone stream."""
        return self._detection is not None and self._detection.interim_transcripts

    def interim_heard(
        self, stream_id: str, so_far: TranscribeSoFar, heard: Interim | None
    ) -> list[Action]:
        """The words of a `TranscribeSoFar` (None: none, the read was skipped or failed):
        shown while the utterance goes on, unless the reader could not read them (the bar
        the end of turn uses: a wrong language's script, a guess); once the utterance ended,
        its turn's transcript says them."""
        self._interim_reading = False
        loop, detection = self._voice_loop, self._detection
        if heard is None or not heard.text or loop is None or detection is None:
            return []
        if detection.stream_id != stream_id or not detection.interim_transcripts:
            return []
        if loop.speaking_utterance != so_far.utterance:
            return []
        if unreadable(heard.logprob, heard.language_probability):
            return []
        shown = InputTranscriptInterim(
            stream_id, heard.text, so_far.start_ms, so_far.end_ms, heard.language
        )
        return [Send(shown)]

    def _on_loop(
        self, stream_id: str | None, step: Callable[[VoiceLoop], list[VoiceEvent]]
    ) -> list[Action]:
        """One step of the voice loop on `stream_id` (None: whichever stream it listens to),
        its events handled; nothing when the loop was turned off or moved meanwhile."""

        def run(_: None) -> list[Action]:
            loop, detection = self._voice_loop, self._detection
            if loop is None or detection is None:
                return []
            if stream_id is not None and detection.stream_id != stream_id:
                return []
            return self._handle_voice(detection.stream_id, detection, step(loop))

        return self._answering_errors(run, None)

    def _handle_voice(
        self, stream_id: str, detection: TurnDetection, events: list[VoiceEvent]
    ) -> list[Action]:
        actions: list[Action] = []
        for event in events:
            # each event on its own: a refused utterance must not drop a barge-in's actions
            actions += self._answering_errors(self._voice_event, (stream_id, detection, event))
        return actions

    def _voice_event(self, args: tuple[str, TurnDetection, VoiceEvent]) -> list[Action]:
        stream_id, detection, event = args
        match event:
            case SpeechStarted(at_ms, over_assistant):
                # speech that began before an answer was heard for the grace is the user going
                # on (an end of turn that came too soon, or more to say): that answer answers
                # what they had not finished, so it stops now, keeping what was heard; what
                # they say is the next turn, never a backchannel
                cut = [] if over_assistant else self._barge_in()
                if cut and self._voice_loop is not None:
                    self._voice_loop.answer_cut()  # unless it is a "stop": a turn
                return [Send(InputSpeechStarted(stream_id, at_ms)), *cut]
            case BargeIn():
                return self._barge_in()
            case SpeechPaused():
                check = [CheckTurn(stream_id, event.pause_id, event.pcm)] if event.check else []
                if not event.guess:
                    return check
                try:
                    guess = self._speculate(detection, event)
                except EdgeError:  # a guess is best effort: the utterance's end decides
                    guess = []
                if not guess:  # no guess, no words to wait for
                    return [*self._words_heard(event.pause_id, None), *check]
                return [*guess, *check]
            case SpeechResumed():
                return self._withdraw()
            case SpeechSoFar() if not self._interim_reading:  # one read at a time
                self._interim_reading = True
                language = detection.language or ""
                read = TranscribeSoFar(
                    stream_id, event.utterance, event.start_ms, event.end_ms, event.pcm, language
                )
                return [read]
            case CommandCheck(check_id=check_id, pcm=pcm):
                return [CheckCommand(stream_id, check_id, pcm, detection.language or "")]
            case SpeechEnded() if event.command:
                return [Send(InputSpeechStopped(stream_id, event.end_ms, ignored="command"))]
            case SpeechEnded() if event.backchannel:
                return [Send(InputSpeechStopped(stream_id, event.end_ms, ignored="backchannel"))]
            case SpeechEnded():
                confirmed = self._confirm(detection, event)
                if confirmed is not None:
                    return confirmed
                return self._utterance_turn(detection, event)
        return []

    def _withdrawn_count(self) -> int:
        """Withdrawn guesses still closing (they do not count as the user's open turns)."""
        return sum(r.withdrawn for r in self._routes.values())

    def _speculate(self, detection: TurnDetection, paused: SpeechPaused) -> list[Action]:
        """Start answering the utterance so far, unseen until the silence rule confirms it.
        Not while many wrong guesses are still closing (a user who pauses a lot): then the
        silence rule alone decides."""
        if self._withdrawn_count() >= self._limits.max_open_turns:
            return []
        actions = self._submit_utterance(
            detection, paused.pcm, paused.end_ms, speculative=True, judge=paused.check
        )
        turn_id = next(reversed(self._routes))
        self._routes[turn_id].speculative = True
        self._routes[turn_id].pause_id = paused.pause_id
        self._speculative = turn_id
        return actions

    def _guess_heard(self, route: Route, event: AnyEvent) -> list[Action]:
        """A frame of the guess still running: its transcript says whether the words stop
        mid-sentence (the semantic end of turn weighs them), with the text model's verdict
        when one follows it; a guess that ended without them says none will come."""
        if isinstance(event, InputTranscribed):
            # the text model's verdict follows: the words wait for it, unless they were
            # too unsure to be trusted whatever it says
            if event.judging and not unreadable(event.logprob, event.language_probability):
                route.judging = event
                return []
            return self._words_heard(route.pause_id, self._unfinished(event, event.ends_sentence))
        if isinstance(event, SentenceEndJudged) and route.judging is not None:
            heard, route.judging = route.judging, None
            return self._words_heard(route.pause_id, self._unfinished(heard, event.ends_sentence))
        if isinstance(event, TurnCompleted):
            return self._words_heard(route.pause_id, None)
        return []

    def _unfinished(self, heard: InputTranscribed, ends_sentence: float) -> bool:
        """Whether a guess's words keep the turn open: they stop mid-sentence, or the ASR
        could not read the speech (then they say nothing of where the sentence is)."""
        detection = self._detection
        language = heard.language or (detection.language if detection else None) or "en"
        readable = not unreadable(heard.logprob, heard.language_probability)
        return guess_unfinished(heard.text, language, ends_sentence, readable=readable)

    def _words_heard(self, pause_id: int, unfinished: bool | None) -> list[Action]:
        return self._on_loop(None, lambda loop: loop.words_verdict(pause_id, unfinished))

    def _confirm(self, detection: TurnDetection, ended: SpeechEnded) -> list[Action] | None:
        """The guess was right: the client hears of the turn now, with what it produced."""
        turn_id, self._speculative = self._speculative, None
        route = self._routes.get(turn_id) if turn_id is not None else None
        if route is None or not route.speculative:
            return None  # refused meanwhile (or no guess): the utterance becomes a turn now
        route.speculative = False
        stopped = InputSpeechStopped(detection.stream_id, ended.end_ms, turn_id=turn_id)
        announced = self._announce(turn_id, route) if route.accepted else []
        confirm = [ConfirmTurn(turn_id)] if route.confirm_tools else []
        return [Send(stopped), *confirm, *announced]

    def _withdraw(self) -> list[Action]:
        """The user went on talking: the guessed turn is void (stopped, and kept out of the
        history by a withdrawal the next turn carries); the utterance continues."""
        turn_id, self._speculative = self._speculative, None
        route = self._routes.get(turn_id) if turn_id is not None else None
        if route is None:
            return []
        route.speculative, route.withdrawn = False, True
        withdrawal = Truncation(turn_id, "", withdrawn=True)
        self._give_back(route)
        self._truncations.setdefault(route.conversation_id, []).append(withdrawal)
        cancel = RequestCancel(turn_id, route.conversation_id, "withdrawn")
        return [cancel, *self._record_truncation(route, withdrawal, "withdrawn")]

    def _record_truncation(self, route: Route, truncation: Truncation, reason: str) -> list[Action]:
        """Publish it (Kafka `turns.completed`); not when the token expired meanwhile (the
        next turn still carries it)."""
        if self.principal is None:
            return []
        event = TurnTruncated(
            turn_id=truncation.turn_id,
            conversation_id=route.conversation_id,
            tenant_id=self.principal.tenant_id,
            user_id=self.principal.user_id,
            truncation=truncation,
            reason=reason,
            truncated_at_ms=self._clock_ms(),
        )
        return [PublishTruncation(event)]

    def _give_back(self, route: Route) -> None:
        """A void guess returns the truncations it carried: the next turn carries them."""
        pending = self._truncations.get(route.conversation_id, [])
        if route.carried:
            self._truncations[route.conversation_id] = [*route.carried, *pending]
            route.carried = []

    def _utterance_turn(self, detection: TurnDetection, ended: SpeechEnded) -> list[Action]:
        """An utterance of the voice loop becomes a turn, like a `turn.create` with audio."""
        actions = self._submit_utterance(detection, ended.pcm, ended.end_ms)
        turn_id = next(reversed(self._routes))  # the route it just opened
        stopped = InputSpeechStopped(detection.stream_id, ended.end_ms, turn_id=turn_id)
        return [Send(stopped), *actions]

    def _submit_utterance(
        self,
        detection: TurnDetection,
        pcm: bytes,
        end_ms: float,
        *,
        speculative: bool = False,
        judge: bool = False,
    ) -> list[Action]:
        """`end_ms`: where its speech ended in the stream (the turn carries when that was)."""
        if self.principal is None:  # expired while its audio was being scored
            raise AuthError("token expired: send session.authenticate", code="token_expired")
        self._audio.clear(detection.stream_id)
        self._audio.append(detection.stream_id, base64.b64encode(pcm).decode())
        msg = CreateTurn(
            conversation_id=detection.conversation_id,
            parts=[
                AudioPart(
                    stream_id=detection.stream_id,
                    format="pcm16",
                    sample_rate=16000,
                    language=detection.language,
                )
            ],
        )
        assert self._voice_loop is not None
        ended_at_ms = self._voice_loop.heard_at_ms(end_ms)
        return self._create_turn(
            self.principal,
            msg,
            speculative=speculative,
            speech_ended_at_ms=ended_at_ms,
            judge_sentence_end=judge,  # semantic_vad: its end of turn waits on the words
        )

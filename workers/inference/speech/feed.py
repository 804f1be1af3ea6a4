"""The answer's shown text, cut into pieces for speech (Kafka `tts.segments`).

The feed sees exactly what the user is shown (after the safety check's hold-back), so speech
never says what the screen does not; pieces are cut at punctuation every 10-20 characters
(`workers.inference.speech.segments`) so the first audio comes after the first clause, not the whole
answer. The last piece is `final`: after it, the TTS worker tells the edge speech ended.
An answer that ends early (cancel, barge-in, safety cut, error) drops what was not sent yet.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from schemas.events import FinishReason, SpeechSettings, SpeechText, TurnSubmitted
from workers.inference.speech.segments import SegmenterConfig, TextSegment, TextSegmenter

SPOKEN_TO_THE_END = frozenset({FinishReason.STOP, FinishReason.LENGTH})


class SpeechFeed:
    def __init__(
        self,
        *,
        turn: TurnSubmitted,
        speech: SpeechSettings,
        attempt: str,
        segments: SegmenterConfig,
        send: Callable[[SpeechText], Awaitable[None]],
        clock_ms: Callable[[], float],
        language: str = "",
    ) -> None:
        self._turn = turn
        self._voice = speech.voice
        self._language = language
        self._attempt = attempt
        self._segmenter = TextSegmenter(segments)
        self._send = send
        self._clock_ms = clock_ms
        self._next_index = 0
        self._sent_to = 0  # characters of the answer in pieces sent so far
        self.finished = False
        self._halted = False

    async def shown(self, text: str) -> None:
        """Text the user was just shown."""
        if self.finished or self._halted:
            return
        for segment in self._segmenter.feed(text):
            await self._send(self._piece(segment))

    def halt(self) -> None:
        """Speak nothing more of this answer (a safety cut): only the final marker follows."""
        self._halted = True

    async def finish(self, finish_reason: FinishReason) -> None:
        """The answer ended: speak the rest (when it ended normally) and close the speech."""
        if self.finished:
            return
        self.finished = True
        to_the_end = finish_reason in SPOKEN_TO_THE_END and not self._halted
        rest = self._segmenter.flush() if to_the_end else []
        for segment in rest[:-1]:
            await self._send(self._piece(segment))
        last = rest[-1] if rest else None
        await self._send(self._piece(last, final=True, finish_reason=finish_reason))

    def _piece(
        self,
        segment: TextSegment | None,
        *,
        final: bool = False,
        finish_reason: FinishReason | None = None,
    ) -> SpeechText:
        index, self._next_index = self._next_index, self._next_index + 1
        if segment is not None:
            self._sent_to = segment.char_end
        turn = self._turn
        return SpeechText(
            turn_id=turn.turn_id,
            conversation_id=turn.conversation_id,
            edge_id=turn.edge_id,
            attempt=self._attempt,
            voice=self._voice,
            language=self._language,
            index=index,
            text=segment.text if segment is not None else "",
            char_start=segment.char_start if segment is not None else self._sent_to,
            final=final,
            finish_reason=finish_reason,
            sent_at_ms=self._clock_ms(),
        )

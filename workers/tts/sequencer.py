"""Speech pieces back in order, and which to skip (pure: no I/O, no loop).

The TTS worker synthesizes several pieces at once (the second clause is ready when the first
finishes playing), but the edge must receive a turn's audio in order, so finished pieces wait
here until every earlier one is out. A cancelled turn (barge-in, cancel, safety cut) skips
what it has not synthesized yet and ends with one `stopped` final frame; a redelivered piece
(Kafka at-least-once) is not spoken twice.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field

from schemas.events import SpeechAudio, SpeechText

MAX_TRACKED = 10_000  # turns (open, cancelled or recently ended) remembered at once


class Admission(enum.Enum):
    SPEAK = "speak"  # synthesize it
    SKIP = "skip"  # its turn was cancelled: release nothing in its place
    DUPLICATE = "duplicate"  # seen already, or its turn's speech ended: ignore


@dataclass(slots=True)
class _Turn:
    edge_id: str
    attempt: str
    next_index: int = 0
    ready: dict[int, SpeechAudio | None] = field(default_factory=dict)  # None: skipped
    closed: bool = False


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A frame for the edge of `edge_id`."""

    edge_id: str
    audio: SpeechAudio


class SpeechSequencer:
    def __init__(self, max_tracked: int = MAX_TRACKED) -> None:
        self._turns: OrderedDict[tuple[str, str], _Turn] = OrderedDict()
        self._cancelled: OrderedDict[str, str] = OrderedDict()  # turn -> reason
        self._max = max_tracked

    def admit(self, piece: SpeechText) -> Admission:
        """What to do with a piece that just arrived."""
        turn = self._turn(piece)
        if turn.closed or piece.index < turn.next_index or piece.index in turn.ready:
            return Admission.DUPLICATE
        if piece.turn_id in self._cancelled:
            return Admission.SKIP
        return Admission.SPEAK

    def cancelled(self, turn_id: str) -> str:
        """Why the turn was cancelled ('' when it was not)."""
        return self._cancelled.get(turn_id, "")

    def done(self, piece: SpeechText, audio: SpeechAudio | None) -> list[Outgoing]:
        """A piece is synthesized (`audio`) or skipped (None): the frames now due, in order."""
        turn = self._turn(piece)
        if turn.closed or piece.index < turn.next_index:
            return []
        turn.ready[piece.index] = audio
        out: list[Outgoing] = []
        while turn.next_index in turn.ready:
            frame = turn.ready.pop(turn.next_index)
            turn.next_index += 1
            if frame is not None:
                out.append(Outgoing(turn.edge_id, frame))
                if frame.final:
                    turn.closed = True
                    turn.ready.clear()
                    break
        return out

    def cancel(self, turn_id: str, reason: str, *, sample_rate: int) -> list[Outgoing]:
        """Stop a turn's speech: its open attempts end now with a `stopped` final frame."""
        self._cancelled[turn_id] = reason
        self._cancelled.move_to_end(turn_id)
        while len(self._cancelled) > self._max:
            self._cancelled.popitem(last=False)
        out: list[Outgoing] = []
        for (tid, attempt), turn in self._turns.items():
            if tid != turn_id or turn.closed:
                continue
            turn.closed = True
            turn.ready.clear()
            stop = SpeechAudio(
                turn_id=turn_id,
                attempt=attempt,
                index=turn.next_index,
                text="",
                char_start=0,
                sample_rate=sample_rate,
                final=True,
                stopped=reason,
            )
            out.append(Outgoing(turn.edge_id, stop))
        return out

    @property
    def open_turns(self) -> int:
        return sum(not t.closed for t in self._turns.values())

    def _turn(self, piece: SpeechText) -> _Turn:
        key = (piece.turn_id, piece.attempt)
        turn = self._turns.get(key)
        if turn is None:
            turn = self._turns[key] = _Turn(piece.edge_id, piece.attempt)
            while len(self._turns) > self._max:
                self._turns.popitem(last=False)  # the oldest: long ended in practice
        return turn

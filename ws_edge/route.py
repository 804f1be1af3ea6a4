"""A turn's route at this edge: whether the client has it, what was sent (for resume and
deduplication), and its spoken answer's state (playback, interruption, a voice guess)."""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.events import (
    AnyEvent,
    InputTranscribed,
    Truncation,
)
from schemas.turn_log import LogPosition
from ws_edge.voice.audio_timeline import AudioTimeline


@dataclass(slots=True)
class Route:
    """What the session knows about one turn it streams to this client."""

    conversation_id: str
    client_turn_id: str | None = None
    accepted: bool = False
    held: list[tuple[AnyEvent, LogPosition | None]] = field(default_factory=list)
    position: LogPosition | None = None  # of the last logged frame handled (resume, dedup)
    resuming: LogPosition | None = None  # a resume's position, until its log is read
    attempt: str | None = None  # the answer being streamed now
    last_seq: int = -1
    shown_chars: int = 0  # characters of the current attempt's deltas sent to the client
    speech: bool = False  # the answer is spoken too: the route lasts until its audio ends
    text_done: bool = False  # response.done sent
    audio_done: bool = False  # response.audio.done sent
    interrupted: bool = False
    timeline: AudioTimeline = field(default_factory=AudioTimeline)
    first_audio_ms: float | None = None  # when its first audio left (playback estimate)
    # the voice loop started it on a guess that the user stopped talking: nothing of it
    # reaches the client until the guess is confirmed; `withdrawn` when it proved wrong
    speculative: bool = False
    pause_id: int = 0  # a guess: the voice loop's pause it was started at (its words answer it)
    # a guess's transcript while the text model's verdict on it is awaited
    judging: InputTranscribed | None = None
    withdrawn: bool = False
    # a guess whose answer may call the deployment's side-effecting tools: they wait for
    # its confirmation (marked in Redis), so the confirmation is told
    confirm_tools: bool = False
    carried: list[Truncation] = field(default_factory=list)  # its turn's `truncates`

"""A turn's resumable log: what is kept, how positions are written, how a resume reads it.

Workers append a turn's response frames to a capped Redis stream (`RedisNames.turn_log_key`)
in the same atomic step that publishes them to the edges (`workers.runtime.relay`). Entry
ids are `<epoch>-<offset>`: the epoch counts the answer's attempts (a worker failover
starts epoch 2), the offset is dense within an epoch (Redis assigns it: `XADD key <epoch>-*`).
A client that saw (epoch, offset) resumes with the entries after it; dense offsets make a
trimmed history detectable (the next entry is not offset + 1) instead of a silent gap.

Speech audio is not logged: replaying stale audio after a reconnect is worse than skipping
it (and it would cost ~50 KB per second of speech in Redis); the text covers it. Image
progress is not logged either; a generated image is (a resume delivers it again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import msgspec

from schemas.codec import decode
from schemas.errors import DecodeError, MalformedEvent
from schemas.events import (
    AnyEvent,
    Event,
    ImageGenerated,
    InputTranscribed,
    TokenChunk,
    TurnCompleted,
    TurnStarted,
)

# How the relay script treats a frame: not logged, logged in the current epoch, the turn's
# end (logged; the log then expires sooner), or logged in its attempt's epoch ("a:<id>").
NOT_LOGGED = "n"
CURRENT_EPOCH = "c"
FINAL = "d"


class LogPosition(NamedTuple):
    """Where a frame sits in its turn's log; tuples order as the log does."""

    epoch: int
    offset: int


START = LogPosition(0, -1)  # before everything: a join from the start


def log_kind(event: Event) -> str:
    """The relay script's instruction for one frame."""
    match event:
        case (
            TurnStarted(attempt=attempt)
            | TokenChunk(attempt=attempt)
            | ImageGenerated(attempt=attempt)
        ) if attempt:
            return f"a:{attempt}"
        case TurnStarted() | TokenChunk() | ImageGenerated() | InputTranscribed():
            return CURRENT_EPOCH
        case TurnCompleted():
            return FINAL
    return NOT_LOGGED


def parse_entry_id(entry_id: bytes | str) -> LogPosition:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    epoch, _, offset = text.partition("-")
    return LogPosition(int(epoch), int(offset))


def range_start(after: LogPosition) -> str:
    """XRANGE's start for the entries after `after` (exclusive), from the very first when
    `after` is START."""
    if after.offset < 0:
        return f"{after.epoch}-0"
    return f"({after.epoch}-{after.offset}"


def decode_entries(
    entries: list[tuple[bytes | str, dict[bytes, bytes]]],
) -> list[tuple[AnyEvent, LogPosition]]:
    """XRANGE's answer as events with their positions (an unreadable entry is skipped: the
    rest of the answer must still reach the client, and `response.done` is whole)."""
    decoded: list[tuple[AnyEvent, LogPosition]] = []
    for entry_id, fields in entries:
        payload = fields.get(b"e")
        if payload is None:
            continue
        try:
            decoded.append((decode(payload), parse_entry_id(entry_id)))
        except (DecodeError, ValueError):
            continue
    return decoded


_items = msgspec.json.Decoder(list[msgspec.Raw])
_positioned = msgspec.json.Decoder(tuple[int, int, msgspec.Raw])


def decode_relay_message(payload: bytes | str) -> list[tuple[AnyEvent, LogPosition | None]]:
    """A relay message (the script's JSON array): each item an event, or `[epoch, offset,
    event]` for a logged one. An unreadable item fails the message (MalformedEvent)."""
    try:
        items = _items.decode(payload)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise MalformedEvent(f"not a relay message: {exc}") from None
    frames: list[tuple[AnyEvent, LogPosition | None]] = []
    for item in items:
        raw = bytes(item)
        try:
            if raw[:1] == b"[":
                epoch, offset, event = _positioned.decode(raw)
                frames.append((decode(bytes(event)), LogPosition(epoch, offset)))
            else:
                frames.append((decode(raw), None))
        except (DecodeError, msgspec.DecodeError, RecursionError):
            raise MalformedEvent(f"unreadable relay item: {raw[:120]!r}") from None
    return frames


ResumeStatus = Literal["resumed", "restarted", "expired"]


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What a resume tells the client before the frames: its status, and the position the
    frames continue from."""

    status: ResumeStatus
    position: LogPosition


def plan_resume(after: LogPosition, first: LogPosition | None, *, log_exists: bool) -> ResumePlan:
    """Decide a resume from the client's position and the first entry after it.

    - nothing after it: `resumed` (live frames follow), unless the log is gone entirely and
      the client had seen something (`expired`: only the recorded outcome remains);
    - the next entry follows on (same epoch, offset + 1): `resumed`;
    - the next entry opens a later epoch at its start: `restarted` when the client had seen
      some of an answer (a failover since), `resumed` when it had seen only the turn's
      pre-answer frames (epoch 0: the transcript);
    - anything else is a hole (the history was trimmed): `expired`.
    """
    if first is None:
        if not log_exists and after != START:
            return ResumePlan("expired", after)
        return ResumePlan("resumed", after)
    if after == START:
        return ResumePlan("resumed", after)
    if first.epoch == after.epoch and first.offset == after.offset + 1:
        return ResumePlan("resumed", after)
    if first.epoch > after.epoch and first.offset == 0:
        if after.epoch == 0:
            return ResumePlan("resumed", after)
        return ResumePlan("restarted", LogPosition(first.epoch, -1))
    return ResumePlan("expired", after)

"""The turns of one partition whose trace is not out yet, and how they are rebuilt (pure).

The traces job keeps them in memory only: no table, no changelog (that was 4 Kafka records
per turn). After a restart or a rebalance the partition's open turns are rebuilt by folding
again the events it had already processed, which the source topics still hold (they are kept
for days): `rebuild` replays them in timestamp order, the clock ticks included, and keeps
what was still open when the job stopped. A turn whose trace went out, in the replay or in
the traces topic (events processed but not committed before a crash), is only remembered
(its redelivered events are then recognised), never emitted twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from schemas.events import AnyEvent, TraceRecorded
from stream_jobs.traces.state import (
    PendingTrace,
    awaiting_assembly,
    expired,
    joins,
    on_event,
    timed_out,
)

TICK = None  # a replayed record of the ticks topic


@dataclass(frozen=True, slots=True)
class Closed:
    """A turn the clock closed: its trace, or None when not even its submission was seen."""

    key: bytes
    trace: TraceRecorded | None


@dataclass(slots=True)
class OpenTurns:
    """One partition's unfinished traces, with when each was first seen and (when only its
    assembly is missing) when its completion came."""

    pending: dict[bytes, PendingTrace] = field(default_factory=dict)
    opened: dict[bytes, float] = field(default_factory=dict)
    awaiting: dict[bytes, float] = field(default_factory=dict)

    def fold(self, event: AnyEvent, at_ms: float) -> TraceRecorded | None:
        """Fold one event in at `at_ms`; the trace when that completes the turn (it is
        then no longer open)."""
        key = event.turn_id.encode()
        pending = self.pending.get(key) or PendingTrace()
        trace = on_event(pending, event)
        if trace is not None:
            self.drop(key)
            return trace
        self.pending[key] = pending
        self.opened.setdefault(key, at_ms)
        if awaiting_assembly(pending):
            self.awaiting.setdefault(key, at_ms)
        return None

    def close_expired(self, now_ms: float, timeout_ms: float, grace_ms: float) -> list[Closed]:
        """Close the turns open longer than `timeout_ms`, and the completed ones that waited
        longer than `grace_ms` for their assembly."""
        late = expired(self.awaiting, now_ms, grace_ms)
        keys = dict.fromkeys(late + expired(self.opened, now_ms, timeout_ms))
        closed = [Closed(key, timed_out(self.pending[key], key.decode(), now_ms)) for key in keys]
        for key in keys:
            self.drop(key)
        return closed

    def drop(self, key: bytes) -> None:
        self.pending.pop(key, None)
        self.opened.pop(key, None)
        self.awaiting.pop(key, None)

    def __len__(self) -> int:
        return len(self.pending)


def replay_horizon_ms(last_processed_ms: float, timeout_ms: float, tick_ms: float) -> float:
    """How far before the last processed record a rebuild starts reading. A turn still open
    was first seen at most one timeout (and a tick) before; reading a second timeout further
    back also sees, whole, the turns whose first events came just before that, so none of
    them is taken for a turn whose submission was never seen."""
    return last_processed_ms - 2 * (timeout_ms + tick_ms)


def rebuild(
    records: Iterable[tuple[float, AnyEvent | None]],
    timeout_ms: float,
    grace_ms: float,
    traced: Iterable[str] = (),
) -> tuple[OpenTurns, list[str]]:
    """The open turns after replaying already-processed `(timestamp_ms, event or TICK)`
    records, and the turn ids whose trace went out. `traced`: the turn ids found in the
    traces topic; a turn open after the replay but traced already (by events processed and
    never committed, which will be redelivered) is not open."""
    turns = OpenTurns()
    # like the live job's memory of recent turns: a later event of a traced turn is skipped
    emitted: dict[str, None] = {}
    for at_ms, event in sorted(records, key=lambda r: r[0]):
        if event is TICK:
            for closed in turns.close_expired(at_ms, timeout_ms, grace_ms):
                if closed.trace is not None:
                    emitted[closed.trace.turn_id] = None
        elif joins(event) and event.turn_id not in emitted:
            trace = turns.fold(event, at_ms)
            if trace is not None:
                emitted[trace.turn_id] = None
    for turn_id in traced:
        turns.drop(turn_id.encode())
        emitted.pop(turn_id, None)
        emitted[turn_id] = None  # the latest last: they are the ones redelivered
    return turns, list(emitted)

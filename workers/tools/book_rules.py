"""The exactly-once books' rules (pure): what a worker does with a tool call, given the
call's entry in the books.

A call is claimed before it runs and its result recorded after. A worker that finds:
- no entry: it claimed the call (the claim is its own) → run it;
- a recorded result → replay it (a redelivery, a retried turn): never run again;
- a live claim of another worker (before its deadline) → wait for its result;
- a dead claim (past its deadline: the claimant died mid-call, or lost its books):
  a read-only tool runs again (nothing to duplicate); any other call's effect is
  unknown — it may have happened — so its result says so (`tool_outcome_unknown`) and
  it is never run a second time.

The deadline is the claim time plus the call's timeout plus a grace period: a live worker
has recorded something (a result, a timeout) by then.
"""

from __future__ import annotations

import enum

import msgspec

UNKNOWN = "tool_outcome_unknown"
UNKNOWN_TEXT = (
    "The tool call's outcome is unknown: the worker running it stopped before its result "
    "was recorded. It may or may not have taken effect; it was not run again."
)


class BookState(enum.StrEnum):
    CLAIMED = "claimed"
    DONE = "done"


class BookEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One call's line in the books (Redis, msgspec JSON)."""

    state: BookState
    worker: str
    claimed_at_ms: float
    deadline_ms: float
    output: str = ""
    outcome: str = ""  # ok, tool_error, an error code, cancelled, tool_outcome_unknown
    duration_ms: float = 0.0


class Step(enum.StrEnum):
    RUN = "run"
    REPLAY = "replay"
    WAIT = "wait"
    RERUN = "rerun"  # a dead claim of a read-only call: take it over and run
    UNKNOWN = "unknown"  # a dead claim of a side effect: record that its outcome is unknown


def next_step(found: BookEntry | None, *, now_ms: float, read_only: bool) -> Step:
    """What to do with a call whose claim attempt found `found` (None: the claim is ours)."""
    if found is None:
        return Step.RUN
    if found.state == BookState.DONE:
        return Step.REPLAY
    if now_ms < found.deadline_ms:
        return Step.WAIT
    return Step.RERUN if read_only else Step.UNKNOWN


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(BookEntry)


def encode_entry(entry: BookEntry) -> bytes:
    return _encoder.encode(entry)


def decode_entry(raw: bytes | None) -> BookEntry | None:
    """An entry, or None for none (an unreadable one counts as a dead claim's: the call's
    outcome is unknown, never run twice)."""
    if raw is None:
        return None
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        return BookEntry(BookState.CLAIMED, "?", 0.0, 0.0)

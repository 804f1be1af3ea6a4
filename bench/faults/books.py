"""The books of a fault run (pure): what each client saw of each turn, what the system
recorded of it, and whether the two agree.

Why a history and not counters: a double answer, a gap in a resumed stream or a turn left
hanging only show when every event a client saw is kept per turn (Jepsen's histories, in
small). The runner records a `TurnHistory` per turn a client tried to create; after the
fault it reads the system's own records (`turns.completed` from Kafka, the `traces` table
from ClickHouse) and `judge` checks each turn:

- accepted (`turn.accepted`, or any frame of the turn) ⇒ exactly one terminal state at the
  client: `response.done` without an error (completed) or with an error code, or an explicit
  error event (a clear error). None is *lost*; two are *answered twice*;
- refused before acceptance with an error code (`broker_unavailable` while Kafka is down)
  is *refused*, not lost: nothing was promised;
- the final attempt's deltas, put together by their log positions, equal `response.done`'s
  text (no gap, no duplicate); a position seen twice is a duplicate;
- `turns.completed` holds one final answer of the turn (a retryable error may be superseded
  by a retry's outcome), the one the client got; two different ones are a double answer,
  the same one twice is counted apart (consumers dedupe records by turn id);
- ClickHouse `traces` holds exactly one row of it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    """What a client did or saw."""

    CREATE = "create"  # sent turn.create (again, after a refusal or a lost connection)
    ACCEPTED = "accepted"  # turn.accepted
    REFUSED = "refused"  # an error event answering turn.create (code)
    STARTED = "started"  # response.started (epoch, offset)
    DELTA = "delta"  # response.delta (epoch, offset, text)
    RESTARTED = "restarted"  # response.restarted (its worker died)
    DONE = "done"  # response.done (code: finish reason; text; error in `error`)
    ERROR = "error"  # an error event about the accepted turn (code)
    DISCONNECTED = "disconnected"  # the connection dropped while the turn was open
    RESUMED = "resumed"  # response.resumed (code: resumed | restarted | expired)
    RESUME_REFUSED = "resume_refused"  # response.resume answered by an error (code)
    GAVE_UP = "gave_up"  # the client stopped waiting (its deadline passed)


@dataclass(frozen=True, slots=True)
class Seen:
    at: float  # seconds since the run started
    kind: Kind
    epoch: int | None = None
    offset: int | None = None
    text: str = ""
    code: str = ""  # error code, finish reason or resume status
    error: str = ""  # response.done's error code ("" when it has none)


@dataclass
class TurnHistory:
    """One turn as its client lived it (several `create`s when it retried)."""

    scenario: str
    user: str
    conversation_id: str
    client_turn_id: str
    index: int  # the turn's number in its conversation, from 1
    created_at: float
    turn_id: str | None = None
    seen: list[Seen] = field(default_factory=list)
    edge: str = ""  # the edge the client follows the turn on now

    def add(self, at: float, kind: Kind, **fields) -> None:
        self.seen.append(Seen(at, kind, **fields))

    def of(self, *kinds: Kind) -> list[Seen]:
        return [s for s in self.seen if s.kind in kinds]


@dataclass(frozen=True, slots=True)
class Completion:
    """One `turn.completed` record of a turn in Kafka."""

    text: str
    finish_reason: str
    error_code: str = ""
    retryable: bool = False
    # who decided it and when (worker id, completed_at_ms): two recordings of a turn are an
    # outcome decided twice, even with the same answer; the same one twice is a re-send
    recording: tuple[str, float] = ("", 0.0)

    @property
    def final(self) -> bool:
        """A retryable error is not final: a retry's outcome may supersede it."""
        return not (self.error_code and self.retryable)

    @property
    def answer(self) -> tuple[str, str, str]:
        """What a reader of the record learns: two records with different answers are a
        turn answered twice; with the same one, see `recording`."""
        return (self.text, self.finish_reason, self.error_code)


class Outcome(StrEnum):
    COMPLETED = "completed"  # one response.done without an error
    ERROR = "error"  # one explicit error the client saw (done with a code, or an error event)
    REFUSED = "refused"  # never accepted; refused with a code
    LOST = "lost"  # accepted, no terminal state at the client
    TWICE = "twice"  # more than one response.done at the client


@dataclass(frozen=True, slots=True)
class Verdict:
    turn_id: str | None
    outcome: Outcome
    error_codes: tuple[str, ...]  # of the terminal error, or of the refusals
    records: int  # final outcomes in turns.completed
    answers: int  # distinct answers among them
    recordings: int  # distinct recordings among them (decided by whom, when)
    recorded_as_seen: bool | None  # the client's response.done is the recorded answer
    traces: int  # rows in ClickHouse traces
    text_ok: bool | None  # None: nothing to compare (no deltas, or an expired resume)
    duplicate_frames: int  # log positions seen twice
    restarted: bool
    resumes: int
    created_at: float
    ended_at: float | None

    @property
    def accepted(self) -> bool:
        return self.outcome is not Outcome.REFUSED

    @property
    def answered_twice(self) -> bool:
        """Two answers: at the client, or two different ones in turns.completed."""
        return self.outcome is Outcome.TWICE or self.answers > 1


def was_accepted(history: TurnHistory) -> bool:
    """The edge promised an answer: turn.accepted, or any frame of the turn reached us."""
    promised = (Kind.ACCEPTED, Kind.STARTED, Kind.DELTA, Kind.DONE, Kind.RESTARTED, Kind.RESUMED)
    return any(s.kind in promised for s in history.seen)


def assembled_text(seen: Sequence[Seen], final_epoch: int | None) -> tuple[str | None, int]:
    """The final attempt's text from its deltas, in log order, and how many deltas repeated a
    position already seen. None when there is nothing to compare: no delta of that attempt,
    or a resume whose history had expired (`response.done` then carries the whole text)."""
    deltas = [s for s in seen if s.kind is Kind.DELTA]
    by_position: dict[tuple[int, int], str] = {}
    duplicates = 0
    for i, delta in enumerate(deltas):
        position = (delta.epoch, delta.offset) if delta.epoch is not None else (-1, i)
        if position in by_position:
            duplicates += 1
        else:
            by_position[position] = delta.text  # type: ignore[index]
    if final_epoch is None and by_position:
        final_epoch = max(epoch for epoch, _ in by_position)
    expired = any(s.kind is Kind.RESUMED and s.code == "expired" for s in seen)
    parts = [text for (epoch, _), text in sorted(by_position.items()) if epoch == final_epoch]
    if expired or not parts:
        return None, duplicates
    return "".join(parts), duplicates


def judge(history: TurnHistory, completions: Sequence[Completion], traces: int) -> Verdict:
    """One turn's verdict from its client history and the system's records of it."""
    dones = history.of(Kind.DONE)
    errors = history.of(Kind.ERROR, Kind.RESUME_REFUSED)
    refusals = history.of(Kind.REFUSED)
    text_ok: bool | None = None
    duplicates = 0
    if not was_accepted(history):
        outcome, codes = Outcome.REFUSED, tuple(s.code for s in refusals)
    elif len(dones) > 1:
        outcome, codes = Outcome.TWICE, tuple(s.error for s in dones if s.error)
    elif dones:
        done = dones[0]
        outcome = Outcome.ERROR if done.error else Outcome.COMPLETED
        codes = (done.error,) if done.error else ()
        text, duplicates = assembled_text(history.seen, done.epoch)
        text_ok = None if text is None else text == done.text
    elif errors:
        outcome, codes = Outcome.ERROR, (errors[-1].code,)
    else:
        outcome, codes = Outcome.LOST, ()
    ends = (Kind.DONE, Kind.ERROR, Kind.RESUME_REFUSED)
    terminal = [s.at for s in history.seen if s.kind in ends]
    if outcome is Outcome.REFUSED and refusals:
        terminal = [refusals[-1].at]
    final = [c for c in completions if c.final]
    recorded_as_seen = None
    if len(dones) == 1 and final:
        seen = (dones[0].text, dones[0].code, dones[0].error)
        recorded_as_seen = seen in {c.answer for c in final}
    return Verdict(
        turn_id=history.turn_id,
        outcome=outcome,
        error_codes=codes,
        records=len(final),
        answers=len({c.answer for c in final}),
        recordings=len({c.recording for c in final}),
        recorded_as_seen=recorded_as_seen,
        traces=traces,
        text_ok=text_ok,
        duplicate_frames=duplicates,
        restarted=any(
            s.kind is Kind.RESTARTED or (s.kind is Kind.RESUMED and s.code == "restarted")
            for s in history.seen
        ),
        resumes=len(history.of(Kind.RESUMED)),
        created_at=history.created_at,
        ended_at=min(terminal) if terminal else None,
    )


@dataclass(frozen=True, slots=True)
class Books:
    """One fault's totals. `balanced`: nothing lost, nothing answered twice, no outcome
    decided twice (two recordings of a turn, even with the same answer: a redelivery that
    generated again), every streamed text whole, every accepted turn's answer recorded in
    Kafka as the client saw it, and traced once in ClickHouse. The same record published
    twice (`resent`: a crash between the publish and the done marker) does not unbalance
    them: it is one decision, and the history and the trace read it as one (reported
    apart)."""

    turns: int  # turns the clients tried to create
    accepted: int
    completed: int
    clear_errors: int
    refused: int
    lost: int
    answered_twice: int
    recorded_twice: int  # one answer, decided more than once (two recordings)
    resent: int  # the same recording in turns.completed more than once
    not_as_recorded: int  # the client's response.done differs from the recorded answer
    text_mismatches: int
    duplicate_frames: int
    unrecorded: int  # accepted, but no final outcome in turns.completed
    traces: int  # trace rows of accepted turns
    traces_missing: int  # accepted turns without a trace
    traces_extra: int  # rows beyond one per accepted turn
    phantoms: int  # refused turns that were answered anyway (recorded or traced)
    restarted: int
    resumed: int
    error_codes: dict[str, int]
    refusal_codes: dict[str, int]

    @property
    def traces_match(self) -> bool:
        return self.traces_missing == 0 and self.traces_extra == 0

    @property
    def balanced(self) -> bool:
        return (
            self.lost == 0
            and self.answered_twice == 0
            and self.recorded_twice == 0
            and self.not_as_recorded == 0
            and self.text_mismatches == 0
            and self.duplicate_frames == 0
            and self.unrecorded == 0
            and self.traces_match
        )


def balance(verdicts: Iterable[Verdict]) -> Books:
    verdicts = list(verdicts)
    accepted = [v for v in verdicts if v.accepted]
    refused = [v for v in verdicts if not v.accepted]
    return Books(
        turns=len(verdicts),
        accepted=len(accepted),
        completed=sum(1 for v in accepted if v.outcome is Outcome.COMPLETED),
        clear_errors=sum(1 for v in accepted if v.outcome is Outcome.ERROR),
        refused=len(refused),
        lost=sum(1 for v in accepted if v.outcome is Outcome.LOST),
        answered_twice=sum(1 for v in accepted if v.answered_twice),
        recorded_twice=sum(1 for v in accepted if v.recordings > 1 and not v.answered_twice),
        resent=sum(1 for v in accepted if v.records > v.recordings),
        not_as_recorded=sum(1 for v in accepted if v.recorded_as_seen is False),
        text_mismatches=sum(1 for v in accepted if v.text_ok is False),
        duplicate_frames=sum(v.duplicate_frames for v in accepted),
        unrecorded=sum(1 for v in accepted if v.records == 0),
        traces=sum(v.traces for v in accepted),
        traces_missing=sum(1 for v in accepted if v.traces == 0),
        traces_extra=sum(max(0, v.traces - 1) for v in accepted),
        phantoms=sum(1 for v in refused if v.records or v.traces),
        restarted=sum(1 for v in accepted if v.restarted),
        resumed=sum(1 for v in accepted if v.resumes),
        error_codes=dict(
            Counter(c for v in accepted if v.outcome is Outcome.ERROR for c in v.error_codes)
        ),
        refusal_codes=dict(Counter(c for v in refused for c in v.error_codes)),
    )


def recovery_s(verdicts: Iterable[Verdict], fault_at: float, healed_at: float) -> float:
    """From the fault until every turn it could touch had ended: those open when it struck
    and those created until it was healed. NaN when one of them never ended (lost)."""
    touched = [
        v
        for v in verdicts
        if v.created_at <= healed_at and (v.ended_at is None or v.ended_at >= fault_at)
    ]
    if not touched:
        return 0.0
    if any(v.ended_at is None for v in touched):
        return math.nan
    return max(max(v.ended_at for v in touched if v.ended_at is not None) - fault_at, 0.0)


def open_at(verdicts: Iterable[Verdict], at: float) -> int:
    """Accepted turns open at `at`: created before it, ended after it (or never)."""
    return sum(
        1
        for v in verdicts
        if v.accepted and v.created_at <= at and (v.ended_at is None or v.ended_at > at)
    )


def slowest_touched_s(verdicts: Iterable[Verdict], fault_at: float, healed_at: float) -> float:
    """The longest a turn the fault could touch took, from its creation to its end: what a
    client lived, whatever the outage's length (a cluster that fails over well keeps it
    near an undisturbed turn's). NaN when one never ended."""
    touched = [
        v
        for v in verdicts
        if v.accepted
        and v.created_at <= healed_at
        and (v.ended_at is None or v.ended_at >= fault_at)
    ]
    if any(v.ended_at is None for v in touched):
        return math.nan
    return max((v.ended_at - v.created_at for v in touched if v.ended_at is not None), default=0.0)


def verdicts_of(
    histories: Iterable[TurnHistory],
    completions: Mapping[str, Sequence[Completion]],
    traces: Mapping[str, int],
) -> list[Verdict]:
    return [
        judge(h, completions.get(h.turn_id or "", ()), traces.get(h.turn_id or "", 0))
        for h in histories
    ]


def history_breaks(histories: Sequence[TurnHistory], verdicts: Sequence[Verdict]) -> int:
    """Answers whose prompt held the wrong history (fake engine only: it answers "You said:
    <question> (turn N)", N the user messages in its prompt). In a conversation whose turns
    all completed, turn k's prompt must hold exactly the k-1 before it: a lost history (a
    job restarted without its table) or a turn counted twice shows as another N."""
    conversations: dict[str, list[tuple[TurnHistory, Verdict]]] = {}
    for history, verdict in zip(histories, verdicts, strict=True):
        conversations.setdefault(history.conversation_id, []).append((history, verdict))
    breaks = 0
    for turns in conversations.values():
        if any(v.outcome is not Outcome.COMPLETED for _, v in turns):
            continue
        for history, _ in turns:
            done = history.of(Kind.DONE)[0]
            breaks += f"(turn {history.index})" not in done.text
    return breaks

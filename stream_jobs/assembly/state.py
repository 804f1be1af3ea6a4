"""A conversation's state in the assembly table, and its transitions (pure: no faust here).

One turn per conversation is in flight at a time: a turn that arrives while another is being
answered waits here until that one's `turn.completed` has added it to the history, so every
prompt contains the turns before it, in order. The state is one msgspec value per
conversation; the table's changelog makes it survive restarts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import msgspec

from schemas.events import (
    ErrorInfo,
    FinishReason,
    Role,
    Route,
    Truncation,
    TurnCompleted,
    TurnEnriched,
)
from schemas.tools import call_text

log = logging.getLogger("turnstream.assembly")

RECENT_TURNS = 32  # answered turn ids remembered, to recognise redeliveries
PENDING_TRUNCATIONS = 4  # barge-ins heard before their turn's completion, kept until it comes


class StoredMessage(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    role: Role
    content: str
    tokens: int  # counted once, when stored, with the served model's tokenizer
    turn_id: str = ""  # the turn it belongs to: truncations and withdrawals find it by this


class ConversationState(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[StoredMessage] = []
    in_flight: TurnEnriched | None = None
    in_flight_since_ms: float = 0.0
    # where the in-flight turn was sent: a redelivery after a restart of this job goes to the
    # same worker (which drops the copy) instead of a second worker answering it too
    in_flight_route: Route | None = None
    waiting: list[TurnEnriched] = []
    recent: list[str] = []
    turns: int = 0
    truncated_turns: int = 0  # prompts that had to drop history to fit the context
    last_pool: str = ""  # the semantic router's last decision: a short follow-up stays there
    last_intent: str = ""
    cache_query: str = ""  # the in-flight turn's question when its answer may be cached
    last_active_ms: float = 0.0
    truncations: list[Truncation] = []  # heard before the answer they cut was recorded
    # the latest answer's tool calls (id -> tool name): the only ones a result may answer
    open_calls: dict[str, str] = {}


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ConversationState)


def encode_state(state: ConversationState) -> bytes:
    return _encoder.encode(state)


def decode_state(raw: bytes | None) -> ConversationState:
    """A row this build cannot read (written by an incompatible version) starts afresh, with
    an error in the log: losing one conversation's history beats stopping every one."""
    if raw is None:
        return ConversationState()
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError as err:
        log.error("unreadable conversation state (%s); starting it afresh", err)
        return ConversationState()


@dataclass(frozen=True, slots=True)
class HistoryLimits:
    max_messages: int = 40
    max_chars: int = 200_000  # keeps one changelog record well under Kafka's 1 MB
    # over a limit, history is cut to (1 - block) of it: the oldest turns go a block at a
    # time, so the history's start (the engine's cached prefix) moves every few turns, not
    # every turn (0: one turn at a time)
    block: float = 0.25


@dataclass(slots=True)
class Decision:
    """What to do after a transition: turns to assemble now, turns to refuse."""

    release: list[TurnEnriched] = field(default_factory=list)
    refuse: list[tuple[TurnEnriched, ErrorInfo]] = field(default_factory=list)


def on_enriched(
    state: ConversationState,
    turn: TurnEnriched,
    *,
    now_ms: float,
    max_held: int,
    idle_expiry_ms: float = float("inf"),
) -> Decision:
    """`max_held`: turns of the conversation held at once (in flight + waiting); more are
    refused as `conversation_busy` (retryable), so a flood waits on the client, not here.
    A conversation idle longer than `idle_expiry_ms` starts with an empty history."""
    if state.messages and now_ms - state.last_active_ms > idle_expiry_ms:
        state.messages = []
    state.last_active_ms = now_ms
    turn_id = turn.turn_id
    if turn_id in state.recent:  # answered already: inference replays the recorded outcome
        return Decision(release=[turn])
    if state.in_flight is not None and state.in_flight.turn_id == turn_id:
        return Decision(release=[turn])  # redelivered while in flight: inference dedupes
    if any(w.turn_id == turn_id for w in state.waiting):
        return Decision()
    if state.in_flight is None:
        state.in_flight, state.in_flight_since_ms = turn, now_ms
        return Decision(release=[turn])
    if 1 + len(state.waiting) >= max_held:
        held = 1 + len(state.waiting)
        message = f"{held} turns of this conversation are already queued; retry later"
        return Decision(refuse=[(turn, ErrorInfo("conversation_busy", message, True))])
    state.waiting.append(turn)
    return Decision()


def on_completed(
    state: ConversationState,
    completed: TurnCompleted,
    *,
    user_text: str,
    count_tokens,
    limits: HistoryLimits,
    now_ms: float,
) -> Decision:
    """The in-flight turn ended: record it (unless it failed), then release the next one.
    `user_text` is the query as the model read it (transcript, image placeholders)."""
    if completed.turn_id in state.recent:
        return Decision()  # a duplicate of turns.completed
    state.last_active_ms = now_ms
    retryable = completed.error is not None and completed.error.retryable
    if not retryable:  # a retry of a retryable failure is a new attempt, not a replay
        _remember(state, completed.turn_id)
    if state.in_flight is None or state.in_flight.turn_id != completed.turn_id:
        # Ended before assembly (bad media, refused): nothing to add, nothing to release.
        state.waiting = [w for w in state.waiting if w.turn_id != completed.turn_id]
        return Decision()
    heard = _take_truncation(state, completed.turn_id)
    withdrawn = heard is not None and heard.withdrawn
    if completed.finish_reason != FinishReason.ERROR and not withdrawn:
        state.messages.append(
            StoredMessage(Role.USER, user_text, count_tokens(user_text), completed.turn_id)
        )
        text = completed.text if heard is None else _heard_part(completed.text, heard.text)
        calls = completed.tool_calls if heard is None else []  # a cut answer's: unheard
        state.open_calls = {c.call_id: c.name for c in calls}
        text += call_text(calls)  # the calls, as the model wrote them
        if text:
            state.messages.append(
                StoredMessage(Role.ASSISTANT, text, count_tokens(text), completed.turn_id)
            )
        trim_history(state, limits)
    return _release_next(state, now_ms)


def on_truncated(state: ConversationState, truncation: Truncation, *, count_tokens) -> None:
    """The user interrupted an answer: the history keeps only what they heard, so the next
    prompt is true to the conversation as they lived it. Idempotent (the edge sends it on
    its own and again with the next turn); an answer not recorded yet gets it when it is.
    A withdrawn turn leaves the history altogether."""
    if truncation.withdrawn and any(m.turn_id == truncation.turn_id for m in state.messages):
        state.messages = [m for m in state.messages if m.turn_id != truncation.turn_id]
        return
    for i, message in enumerate(state.messages):
        if message.role == Role.ASSISTANT and message.turn_id == truncation.turn_id:
            text = _heard_part(message.content, truncation.text)
            if text:
                state.messages[i] = StoredMessage(
                    Role.ASSISTANT, text, count_tokens(text), message.turn_id
                )
            else:  # interrupted before a word was heard
                del state.messages[i]
            return
    pending = {w.turn_id for w in state.waiting}
    if state.in_flight is not None:
        pending.add(state.in_flight.turn_id)
    if truncation.turn_id in pending:
        state.truncations = [t for t in state.truncations if t.turn_id != truncation.turn_id]
        state.truncations.append(truncation)
        del state.truncations[:-PENDING_TRUNCATIONS]


def _take_truncation(state: ConversationState, turn_id: str) -> Truncation | None:
    for t in state.truncations:
        if t.turn_id == turn_id:
            state.truncations = [o for o in state.truncations if o.turn_id != turn_id]
            return t
    return None


def _heard_part(answer: str, heard: str) -> str:
    """What stays of `answer`: the heard text, never more than the answer (a truncation
    only shortens; one that does not match the answer keeps the answer's own prefix)."""
    heard = heard.rstrip()
    if answer.startswith(heard):
        return heard
    return answer[: len(heard)].rstrip()


def on_stale(state: ConversationState, *, now_ms: float, stale_after_ms: float) -> Decision:
    """Safety valve: an in-flight turn whose completion never came stops blocking the
    conversation after `stale_after_ms` (its answer, if it ever comes, is not recorded)."""
    if state.in_flight is None or now_ms - state.in_flight_since_ms < stale_after_ms:
        return Decision()
    _remember(state, state.in_flight.turn_id)
    return _release_next(state, now_ms)


def _release_next(state: ConversationState, now_ms: float) -> Decision:
    state.in_flight, state.in_flight_route = None, None
    if not state.waiting:
        return Decision()
    state.in_flight, state.in_flight_since_ms = state.waiting.pop(0), now_ms
    return Decision(release=[state.in_flight])


def _remember(state: ConversationState, turn_id: str) -> None:
    state.recent.append(turn_id)
    del state.recent[:-RECENT_TURNS]


def trim_history(state: ConversationState, limits: HistoryLimits) -> None:
    """Oldest messages go first; whole turns, so history never opens with an answer. Once
    over a limit, down to `1 - limits.block` of it (a block of turns at once)."""
    if not _over(state, limits.max_messages, limits.max_chars):
        return
    keep = 1.0 - limits.block
    max_messages, max_chars = int(limits.max_messages * keep), int(limits.max_chars * keep)
    while state.messages and _over(state, max_messages, max_chars):
        del state.messages[0]
        while state.messages and state.messages[0].role == Role.ASSISTANT:
            del state.messages[0]


def _over(state: ConversationState, max_messages: int, max_chars: int) -> bool:
    return (
        len(state.messages) > max_messages
        or sum(len(m.content) for m in state.messages) > max_chars
    )

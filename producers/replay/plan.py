"""What a replay plays, as pure data: conversations of turns, rewritten for one run.

A replay re-runs recorded turns (a slice of Kafka `turns.submitted`) or an eval set's items
into an isolated namespace. Each conversation is played in order (a turn is sent only after
the one before it finished, so its history holds the *candidate's* answers), conversations
in parallel. Ids are derived from the run id and the source, so rerunning the same run id
makes the same turns (and a retry of one publish is the same turn, answered once), and
nothing of a run can collide with live traffic or another run.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import msgspec

from producers.errors import ProducerError
from schemas.events import DecodingParams, MediaRef, TurnSubmitted
from schemas.flywheel import Candidate, EvalItem, MediaItem

_RUN_NAMESPACE = uuid.UUID("0b6f3c7e-2a41-4d0e-9a3b-5f2d8c1e7a90")
EVAL_TENANT = "eval"
EVAL_USER = "replay"


class PlanError(ProducerError, ValueError):
    """A source that cannot be replayed as given (the message says what and where)."""


@dataclass(frozen=True, slots=True)
class PlannedTurn:
    source_id: str  # the recorded turn's id, or `<item_id>#<index>`
    item_id: str
    index: int  # its place in the conversation
    text: str
    media: list[MediaRef] = field(default_factory=list)
    media_files: list[MediaItem] = field(default_factory=list)  # eval sets: files to upload
    tenant_id: str = EVAL_TENANT
    user_id: str = EVAL_USER
    recorded_at_ms: float = 0.0  # when it was first submitted (pace "recorded")
    scored: bool = True
    decoding: DecodingParams = field(default_factory=DecodingParams)


@dataclass(frozen=True, slots=True)
class PlannedConversation:
    conversation_id: str  # the source's
    turns: list[PlannedTurn]


def from_eval_items(items: list[EvalItem]) -> list[PlannedConversation]:
    """One conversation per item: its turns in order, the last one scored."""
    conversations = []
    for item in items:
        if not item.turns:
            raise PlanError(f"item {item.item_id!r} has no turns")
        last = len(item.turns) - 1
        turns = [
            PlannedTurn(
                source_id=f"{item.item_id}#{i}",
                item_id=item.item_id,
                index=i,
                text=turn.text,
                media_files=list(turn.media),
                scored=i == last,
            )
            for i, turn in enumerate(item.turns)
        ]
        conversations.append(PlannedConversation(item.item_id, turns))
    return conversations


def from_recorded(
    turns: list[TurnSubmitted], *, tenant: str = "", max_turns: int = 0
) -> list[PlannedConversation]:
    """Recorded turns grouped by conversation, in submission order (every turn scored: a
    slice has no reference answers, only outcomes, latency and cost). Duplicates (a
    client's retry of the same turn) are played once."""
    seen: set[str] = set()
    by_conversation: dict[str, list[TurnSubmitted]] = {}
    for turn in sorted(turns, key=lambda t: (t.submitted_at_ms, t.turn_id)):
        if turn.turn_id in seen or (tenant and turn.tenant_id != tenant):
            continue
        if turn.run_id:
            continue  # an earlier replay's turn, not live traffic
        seen.add(turn.turn_id)
        by_conversation.setdefault(turn.conversation_id, []).append(turn)
    conversations = []
    count = 0
    for conversation_id, whole in by_conversation.items():
        if max_turns and count >= max_turns:
            break
        recorded = whole[: max_turns - count] if max_turns else whole
        count += len(recorded)
        planned = [
            PlannedTurn(
                source_id=t.turn_id,
                item_id=t.turn_id,
                index=i,
                text=t.text,
                media=list(t.media),
                tenant_id=t.tenant_id,
                user_id=t.user_id,
                recorded_at_ms=t.submitted_at_ms,
                decoding=t.decoding,
            )
            for i, t in enumerate(recorded)
        ]
        conversations.append(PlannedConversation(conversation_id, planned))
    return conversations


def replay_turn_id(run_id: str, source_id: str) -> str:
    return uuid.uuid5(_RUN_NAMESPACE, f"{run_id}/{source_id}").hex


def replay_conversation_id(run_id: str, conversation_id: str) -> str:
    """The conversation in the run (ids stay within the protocol's 64 characters)."""
    digest = uuid.uuid5(_RUN_NAMESPACE, f"{run_id}/{conversation_id}").hex[:16]
    return f"r-{run_id[:20]}-{digest}"


def decoding_for(recorded: DecodingParams, candidate: Candidate) -> DecodingParams:
    """The candidate's decoding where it sets one, else the recorded turn's; temperature 0
    unless the candidate says otherwise, so reruns compare like with like."""
    return msgspec.structs.replace(
        recorded,
        max_tokens=candidate.max_tokens or recorded.max_tokens,
        temperature=0.0 if candidate.temperature is None else candidate.temperature,
        seed=candidate.seed if candidate.seed is not None else recorded.seed,
    )


def submitted_for(
    turn: PlannedTurn,
    conversation_id: str,
    *,
    run_id: str,
    candidate: Candidate,
    edge_id: str,
    now_ms: float,
    media: list[MediaRef] | None = None,
) -> TurnSubmitted:
    """The event a replay publishes for one planned turn."""
    return TurnSubmitted(
        turn_id=replay_turn_id(run_id, turn.source_id),
        conversation_id=replay_conversation_id(run_id, conversation_id),
        tenant_id=turn.tenant_id,
        user_id=turn.user_id,
        edge_id=edge_id,
        text=turn.text,
        submitted_at_ms=now_ms,
        decoding=decoding_for(turn.decoding, candidate),
        client=f"replay/{candidate.name}",
        media=turn.media if media is None else media,
        pool=candidate.pool,
        run_id=run_id,
    )


def pace_offsets_s(conversations: list[PlannedConversation]) -> dict[str, float]:
    """Pace "recorded": each conversation starts when it started in the recording, relative
    to the first one (its later turns still wait for the answer before them)."""
    starts = [c.turns[0].recorded_at_ms for c in conversations if c.turns]
    if not starts:
        return {}
    first = min(starts)
    return {
        c.conversation_id: max(0.0, (c.turns[0].recorded_at_ms - first) / 1000)
        for c in conversations
        if c.turns
    }


def check_namespace(namespace: str, live_namespace: str) -> None:
    """A replay never runs in the live namespace (its topics and consumer groups would mix
    replayed turns into live traffic): the run's namespace must be its own."""
    if not namespace:
        raise PlanError("a replay needs a namespace of its own (--namespace replay-...)")
    if namespace == live_namespace:
        raise PlanError(f"namespace {namespace!r} is the live one: a replay never writes there")
    if not namespace.startswith("replay-"):
        raise PlanError(f"replay namespaces start with 'replay-' (got {namespace!r})")

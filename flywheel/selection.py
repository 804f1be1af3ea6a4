"""Which recorded turns go into an eval set, and the items they become (pure).

ClickHouse does the selecting: `selection_sql` is one query per set kind over `traces` (one
row per turn) joined to the turn's feedback (golden sets add the recorded answer from
`turns`; fix sets the after-the-fact audit verdict from `events`). `HISTORY_SQL` then reads
the `turn.submitted` events of the chosen turns' conversations: their payloads hold the
user's text and media references. Everything after the rows happens here: why a turn is in
the set (`assess`), the conversation up to it (`conversation`), its media (`finish`), dedup,
order and the set's version name.

The SQL keeps its bind parameters (`{since:DateTime64(3)}`) unsubstituted: an item's
provenance names the query that chose it, not the moment it ran, so two builds over the
same data give byte-identical items (the manifest records the parameters).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.events import OUTPUT_CUT, MediaRef, TurnSubmitted
from schemas.flywheel import EvalItem, Expect, ItemTurn, MediaItem, Provenance, SetKind

# --- the window ------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_when(text: str, now: datetime) -> datetime:
    """`7d`, `12h`, `30m`, `2w` before `now`, or an ISO date or time (UTC unless it says)."""
    match = _DURATION.match(text)
    if match:
        return now - timedelta(**{_UNITS[match[2]]: int(match[1])})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (7d, 12h, 30m, 2w) nor an ISO date/time"
        ) from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Window:
    """The recorded turns a build looks at: submitted in [since, until), of one tenant or
    all (`tenant` empty)."""

    since: datetime
    until: datetime
    tenant: str = ""

    def parameters(self, limit: int | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"since": self.since, "until": self.until, "tenant": self.tenant}
        if limit is not None:
            params["limit"] = limit
        return params


# --- the queries -----------------------------------------------------------------------------

FIX_FEEDBACK = ("thumbs_down", "regenerate", "stop", "abandon")
NEGATIVE_FEEDBACK = FIX_FEEDBACK  # any of them keeps a liked turn out of a golden set
SAFETY_REASONS = frozenset({"safety_block", "output_cut", "audit_block"})

# every selection returns these columns, in this order (`RecordedTurn.from_row`)
COLUMNS = (
    "turn_id",
    "conversation_id",
    "tenant_id",
    "submitted_at",
    "status",
    "finish_reason",
    "error_code",
    "input_safety",
    "safety_labels",
    "cut_window",
    "image_count",
    "audio_count",
    "feedback",
    "answer",
    "audit",
)

_SELECT = """
SELECT t.turn_id, t.conversation_id, t.tenant_id, t.submitted_at, t.status, t.finish_reason,
    t.error_code, t.input_safety, t.safety_labels, t.cut_window, t.image_count, t.audio_count,
    f.kinds AS feedback, {answer} AS answer, {audit} AS audit
FROM {db}.traces AS t FINAL
LEFT JOIN (
    SELECT turn_id, groupUniqArray(toString(kind)) AS kinds FROM {db}.feedback FINAL
    WHERE given_at >= {since:DateTime64(3)} GROUP BY turn_id
) AS f ON f.turn_id = t.turn_id
"""
# golden: the answer the user liked (`turns` keeps the text; the latest completion wins)
_ANSWER_JOIN = """
LEFT JOIN (
    SELECT turn_id, argMax(text, completed_at) AS text FROM {db}.turns
    WHERE completed_at >= {since:DateTime64(3)} GROUP BY turn_id
) AS a ON a.turn_id = t.turn_id
"""
# fix: the audit's latest verdict on the exchange (see the view audited_traces)
_AUDIT_JOIN = """
LEFT JOIN (
    SELECT turn_id, argMax(splitByChar(':', toString(detail))[2], at) AS action
    FROM {db}.events
    WHERE kind = 'safety.verdict' AND startsWith(toString(detail), 'audit:')
        AND at >= {since:DateTime64(3)}
    GROUP BY turn_id
) AS v ON v.turn_id = t.turn_id
"""
_WHERE = """
WHERE t.submitted_at >= {since:DateTime64(3)} AND t.submitted_at < {until:DateTime64(3)}
    AND ({tenant:String} = '' OR t.tenant_id = {tenant:String}){live}
    AND ({condition})
ORDER BY t.submitted_at DESC, t.turn_id
"""
# replays (producers/replay) record their turns beside live ones, tagged with their run
# (migration 0011): a set is made of what users did, never of a candidate's replay
_LIVE = " AND t.run_id = ''"
# whether `traces` can tell replayed turns apart (a database migrated before 0011 cannot)
RUN_ID_SQL = (
    "SELECT count() FROM system.columns"
    " WHERE database = {database:String} AND table = 'traces' AND name = 'run_id'"
)


def _quoted(values: Iterable[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


_CONDITIONS = {
    SetKind.FIX: (
        f"hasAny(f.kinds, [{_quoted(FIX_FEEDBACK)}]) OR t.input_safety = 'block'"
        f" OR t.cut_window >= 0 OR t.error_code IN ('input_blocked', '{OUTPUT_CUT}')"
        " OR v.action = 'block' OR t.finish_reason = 'error' OR t.status = 'timed_out'"
    ),
    SetKind.GOLDEN: (
        f"has(f.kinds, 'thumbs_up') AND NOT hasAny(f.kinds, [{_quoted(NEGATIVE_FEEDBACK)}])"
        " AND t.finish_reason = 'stop' AND t.input_safety != 'block' AND t.cut_window < 0"
    ),
    SetKind.REDTEAM: "t.input_safety = 'block'",
    SetKind.MULTIMODAL: "t.image_count > 0 OR t.audio_count > 0",
}


def selection_sql(
    kind: SetKind, database: str, *, limit: bool = False, live_only: bool = True
) -> str:
    """The query choosing the recorded turns of a `kind` set (newest first), with bind
    parameters since, until, tenant (and limit); `live_only` leaves replayed turns out."""
    condition = _CONDITIONS.get(kind)
    if condition is None:
        raise ValueError(f"a {kind} set takes no recorded turns")
    answer = "a.text" if kind is SetKind.GOLDEN else "''"
    audit = "v.action" if kind is SetKind.FIX else "''"
    sql = _SELECT.replace("{answer}", answer).replace("{audit}", audit)
    sql += _ANSWER_JOIN if kind is SetKind.GOLDEN else ""
    sql += _AUDIT_JOIN if kind is SetKind.FIX else ""
    sql += _WHERE.replace("{condition}", condition).replace("{live}", _LIVE * live_only)
    sql += "LIMIT {limit:UInt32}" if limit else ""
    return one_line(sql.replace("{db}", database))


# the conversations' user turns, as the edge accepted them (text, media references, and
# the turns the voice loop withdrew); `until` keeps later turns out
HISTORY_SQL = """
SELECT payload FROM {db}.events FINAL
WHERE kind = 'turn.submitted' AND tenant_id IN {tenants:Array(String)}
    AND conversation_id IN {conversations:Array(String)} AND at < {until:DateTime64(3)}
"""


def history_sql(database: str) -> str:
    return one_line(HISTORY_SQL.replace("{db}", database))


def one_line(sql: str) -> str:
    return " ".join(sql.split())


# --- rows → items ----------------------------------------------------------------------------


def utc(value: datetime) -> datetime:
    """ClickHouse clients hand back naive UTC or aware datetimes; make both aware UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def iso(value: datetime) -> str:
    return utc(value).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """One selected row: the turn's trace, feedback, answer and audit verdict."""

    turn_id: str
    conversation_id: str
    tenant_id: str
    submitted_at: datetime
    status: str = "completed"
    finish_reason: str = "stop"
    error_code: str = ""
    input_safety: str = ""
    safety_labels: tuple[str, ...] = ()
    cut_window: int = -1
    image_count: int = 0
    audio_count: int = 0
    feedback: tuple[str, ...] = ()
    answer: str = ""
    audit: str = ""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> RecordedTurn:
        v = dict(zip(COLUMNS, row, strict=True))
        return cls(
            turn_id=str(v["turn_id"]),
            conversation_id=str(v["conversation_id"]),
            tenant_id=str(v["tenant_id"]),
            submitted_at=utc(v["submitted_at"]),
            status=str(v["status"]),
            finish_reason=str(v["finish_reason"]),
            error_code=str(v["error_code"]),
            input_safety=str(v["input_safety"]),
            safety_labels=tuple(str(x) for x in v["safety_labels"]),
            cut_window=int(v["cut_window"]),
            image_count=int(v["image_count"]),
            audio_count=int(v["audio_count"]),
            feedback=tuple(sorted({str(x) for x in v["feedback"] or ()})),
            answer=str(v["answer"] or ""),
            audit=str(v["audit"] or ""),
        )

    @property
    def blocked(self) -> bool:
        return self.input_safety == "block" or self.error_code == "input_blocked"

    @property
    def cut(self) -> bool:
        return self.cut_window >= 0 or self.error_code == OUTPUT_CUT

    @property
    def modalities(self) -> list[str]:
        return [m for m, n in (("image", self.image_count), ("audio", self.audio_count)) if n]


@dataclass(frozen=True, slots=True)
class Skip:
    """Why a selected turn did not become an item (counted in the manifest's notes)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Assessment:
    """Why a turn is in the set and what a good answer to it does."""

    reasons: list[str]
    expect: Expect
    reference: str = ""
    tags: list[str] = field(default_factory=list)


def fix_reasons(turn: RecordedTurn) -> list[str]:
    """What went wrong with a turn, in a fixed order (users' signals first)."""
    reasons = [kind for kind in FIX_FEEDBACK if kind in turn.feedback]
    reasons += ["safety_block"] if turn.blocked else []
    reasons += ["output_cut"] if turn.cut else []
    reasons += ["audit_block"] if turn.audit == "block" else []
    if turn.status == "timed_out":
        reasons.append("timed_out")
    elif turn.finish_reason == "error":
        reasons.append("error")
    return reasons


def assess(kind: SetKind, turn: RecordedTurn) -> Assessment | Skip:
    """The item-level facts of a selected turn for a `kind` set.

    fix: a safety-only case (blocked, cut, flagged by the audit) expects `any`: whether the
    screen was right is for a person to judge (then move it to a golden or red-team set);
    a case users complained about, or that failed, expects an answer."""
    if kind is SetKind.FIX:
        reasons = fix_reasons(turn)
        if not reasons:
            return Skip("no longer a bad case")
        expect = Expect.ANY if set(reasons) <= SAFETY_REASONS else Expect.ANSWER
    elif kind is SetKind.GOLDEN:
        if "thumbs_up" not in turn.feedback or set(turn.feedback) & set(NEGATIVE_FEEDBACK):
            return Skip("no longer liked")
        if not turn.answer.strip():
            return Skip("no recorded answer")
        reasons, expect = ["thumbs_up"], Expect.ANSWER
    elif kind is SetKind.REDTEAM:
        if not turn.blocked:
            return Skip("not blocked")
        reasons, expect = ["safety_block"], Expect.REFUSE
    elif kind is SetKind.MULTIMODAL:
        reasons = turn.modalities
        if not reasons:
            return Skip("no media")
        answered = turn.finish_reason in ("stop", "length") and not (turn.blocked or turn.cut)
        expect = Expect.ANSWER if answered else Expect.ANY
    else:
        raise ValueError(f"a {kind} set takes no recorded turns")
    tags = {*reasons, *turn.modalities, *turn.safety_labels}
    if turn.error_code and "error" in reasons:
        tags.add(f"error:{turn.error_code}")
    reference = turn.answer if kind is SetKind.GOLDEN else ""
    return Assessment(reasons, expect, reference, sorted(tags))


def conversation(
    target: RecordedTurn, submitted: Iterable[TurnSubmitted], max_turns: int
) -> list[TurnSubmitted] | None:
    """The user turns of `target`'s conversation up to and including it, in order (the last
    `max_turns`), without turns the voice loop withdrew; None when `target`'s own event is
    not there (events are kept 90 days, traces longer)."""
    mine = {
        e.turn_id: e
        for e in submitted
        if e.conversation_id == target.conversation_id and e.tenant_id == target.tenant_id
    }
    if target.turn_id not in mine:
        return None
    ordered = sorted(mine.values(), key=lambda e: (e.submitted_at_ms, e.turn_id))
    upto = ordered[: ordered.index(mine[target.turn_id]) + 1]
    withdrawn = {t.turn_id for e in upto for t in e.truncates if t.withdrawn}
    kept = [e for e in upto if e.turn_id not in withdrawn or e.turn_id == target.turn_id]
    return kept[-max_turns:]


@dataclass(frozen=True, slots=True)
class Draft:
    """A selected turn with its conversation, waiting for its media to be copied."""

    kind: SetKind
    turn: RecordedTurn
    turns: list[TurnSubmitted]
    assessment: Assessment
    query: str

    def media_refs(self) -> list[MediaRef]:
        return [ref for t in self.turns for ref in t.media]


def finish(draft: Draft, media: Mapping[str, MediaItem]) -> EvalItem | Skip:
    """The item of a draft, given the set's files for the media that could be copied (keyed
    by the recorded sha256). An item missing any of its media is skipped, never shortened:
    its conversation would not be the one recorded."""
    turns = []
    for submitted in draft.turns:
        files = []
        for ref in submitted.media:
            if not ref.sha256:
                return Skip("media by URL (not copied)")
            item = media.get(ref.sha256)
            if item is None:
                return Skip("media expired")
            files.append(item)
        turns.append(ItemTurn(text=submitted.text, media=files))
    a, turn = draft.assessment, draft.turn
    return EvalItem(
        item_id=turn.turn_id,
        kind=draft.kind,
        turns=turns,
        expect=a.expect,
        reference=a.reference,
        tags=a.tags,
        provenance=Provenance(
            source="clickhouse",
            turn_id=turn.turn_id,
            conversation_id=turn.conversation_id,
            tenant_id=turn.tenant_id,
            recorded_at=iso(turn.submitted_at),
            reason=",".join(a.reasons),
            query=draft.query,
        ),
    )


# --- the set ---------------------------------------------------------------------------------


def content_key(item: EvalItem) -> tuple:
    """What a replay would play: the same conversation twice is one case."""
    return tuple((t.text.strip(), tuple(m.sha256 for m in t.media)) for t in item.turns)


@dataclass(frozen=True, slots=True)
class Arranged:
    items: list[EvalItem]
    duplicates: int = 0
    over_limit: int = 0


def arrange(
    file_items: Sequence[EvalItem], recorded: Sequence[EvalItem], limit: int | None = None
) -> Arranged:
    """The set's order: file items as written, then recorded turns newest first (ties by
    id). A later item with an id or a conversation seen before is a duplicate (dropped);
    then the first `limit` are kept."""
    by_id = sorted(recorded, key=lambda i: i.item_id)
    newest_first = sorted(by_id, key=lambda i: i.provenance.recorded_at, reverse=True)
    kept: list[EvalItem] = []
    ids: set[str] = set()
    contents: set[tuple] = set()
    duplicates = 0
    for item in [*file_items, *newest_first]:
        key = content_key(item)
        if item.item_id in ids or key in contents:
            duplicates += 1
            continue
        ids.add(item.item_id)
        contents.add(key)
        kept.append(item)
    over = max(0, len(kept) - limit) if limit is not None else 0
    return Arranged(kept[: len(kept) - over], duplicates, over)


def version_name(created: datetime, items_sha256: str) -> str:
    """`YYYYMMDD-HHMMSS-<8 hex of items.jsonl's sha256>`: sorts by time, and two builds of
    the same items are recognisably the same."""
    return f"{utc(created):%Y%m%d-%H%M%S}-{items_sha256[:8]}"


def notes_text(
    skipped: Counter[str],
    *,
    duplicates: int = 0,
    over_limit: int = 0,
    unreadable: int = 0,
    same_as: Sequence[str] = (),
    warnings: Sequence[str] = (),
) -> str:
    """The manifest's account of everything left out, so nothing is dropped silently."""
    parts = [f"{n} skipped: {reason}" for reason, n in sorted(skipped.items())]
    if duplicates:
        parts.append(f"{duplicates} duplicate{'s' if duplicates > 1 else ''} dropped")
    if over_limit:
        parts.append(f"{over_limit} over --limit left out")
    if unreadable:
        parts.append(f"{unreadable} unreadable turn.submitted event(s) ignored")
    if same_as:
        parts.append(f"same items as {', '.join(same_as)}")
    return "; ".join([*parts, *warnings])

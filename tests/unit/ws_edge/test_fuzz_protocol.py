"""Property-based fuzzing of the edge's session state machine (`ws_edge.session.Session`).

The session is the only code that reads what a client sends, and the only code that decides
which relayed frames reach which client, so it is where hostile input and cross-user leaks
would get through. Properties:

- `receive` never raises, whatever the frame (bytes, text, JSON, messages with valid tags
  and broken fields, huge, deeply nested, unicode), and every `Send` it returns encodes
  with `encode_server` and decodes back to the same event with `server_decoder`;
- before a successful `session.authenticate` nothing but `error`/`pong` comes out, no turn,
  no route; forged, tampered and expired tokens never authenticate;
- random interleavings of client messages, shell callbacks (submit acks, resumes, speech
  deadlines, voice activity) and relay events (any turn id, any seq/attempt/position,
  replayed out of order) never raise, never exceed the open-turn limit, and never send a
  frame of a turn the session did not create or resume (after the shell's ownership check);
- another user's turn ids, named in `turn.cancel`/`turn.interrupt`/`feedback`/
  `response.resume`, never produce an action on that turn unless it carries the session's
  own principal for the shell's ownership check (`feedback`, `ResumeTurn`): cancelling has
  no check in the shell (`ws_edge.door.TurnDoor._cancel`), so the session must refuse.

The tests model the shell (`ws_edge.server`) in a few lines: a conversation claim per
tenant, the turn registry it checks resumes against, acks for submitted turns.

Example counts: TURNSTREAM_FUZZ_EXAMPLES (default 200); e.g.
`TURNSTREAM_FUZZ_EXAMPLES=20000 pytest tests/unit/ws_edge/test_fuzz_protocol.py`.
"""

from __future__ import annotations

import base64
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import jwt
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.events import (
    OUTPUT_CUT,
    AnyEvent,
    ErrorInfo,
    FinishReason,
    InputTranscribed,
    SpeechAudio,
    Timings,
    TokenChunk,
    TranscriptSegment,
    TurnCompleted,
    TurnStarted,
    Usage,
)
from schemas.turn_log import LogPosition, ResumePlan
from tests.unit.schemas.test_fuzz_codec import json_values, msgspec_strategy
from ws_edge.actions import (
    Action,
    CheckCommand,
    CheckTurn,
    Close,
    DetectSpeech,
    DropAudio,
    GiveFeedback,
    PublishTruncation,
    RecordSpeech,
    RequestCancel,
    ResumeTurn,
    Send,
    SubmitTurn,
)
from ws_edge.auth import ISSUER, Principal, mint_token
from ws_edge.errors import BrokerUnavailable, EdgeError, ForbiddenConversation, UnknownTurn
from ws_edge.media import MediaLimits
from ws_edge.messages import (
    CLIENT_TYPES,
    ID_PATTERN,
    AnyClientMessage,
    Authenticate,
    ErrorEvent,
    Pong,
    SessionReady,
    client_decoder,
    encode_server,
    server_decoder,
)
from ws_edge.session import MAX_AUTH_FAILURES, Session, SessionLimits
from ws_edge.voice.loop import FRAME_BYTES

EXAMPLES = int(os.environ.get("TURNSTREAM_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SECRET = "a-fuzz-secret-that-is-long-enough-for-hs256-and-for-hs384"
OTHER_SECRET = "another-secret-that-is-long-enough-for-hs256-and-for-hs384"
LIMITS = SessionLimits(  # small, so that fuzzed frames cross every limit cheaply
    max_message_bytes=4096,
    max_open_turns=3,
    max_media_message_bytes=256 * 1024,
    media=MediaLimits(
        max_media_bytes=64 * 1024,
        max_images=2,
        max_audio_buffer_bytes=512 * 1024,
        max_text_chars=1000,
    ),
)
AUTH_CODES = {"unauthenticated", "token_invalid", "token_expired"}


class Clock:
    def __init__(self) -> None:
        self.ms = time.time() * 1000  # tokens carry real `exp`s (PyJWT checks them)

    def __call__(self) -> float:
        return self.ms


def new_session(clock: Clock, name: str = "s") -> Session:
    return Session(
        session_id=name, edge_id="edge-1", auth_secret=SECRET, limits=LIMITS, clock_ms=clock
    )


def frame(**fields: Any) -> str:
    return msgspec.json.encode(fields).decode()


# ---- the checks every returned action must pass ---------------------------------------------
def assert_round_trips(actions: list[Action]) -> None:
    """A list of actions; every Send's event encodes, and decodes to the very same event."""
    assert isinstance(actions, list), actions
    for action in actions:
        if isinstance(action, Send):
            wire = encode_server(action.event)
            assert server_decoder.decode(wire) == action.event, wire


# ---- frames ----------------------------------------------------------------------------------
tenants = st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True)
users = st.text(min_size=1, max_size=12)
made_up_ids = st.from_regex(ID_PATTERN, fullmatch=True)


@st.composite
def forged_tokens(draw: st.DrawFn) -> str:
    """Tokens that must never authenticate: other secret, expired, `alg: none` or another
    algorithm, signed content edited, signature stripped or moved, random text."""
    user, tenant = draw(users), draw(tenants)
    good = mint_token(SECRET, user, tenant)
    header, payload, signature = good.split(".")
    now = int(time.time())
    claims = {"sub": user, "tenant": tenant, "iat": now, "exp": now + 3600, "iss": ISSUER}
    kind = draw(
        st.sampled_from(
            ["secret", "expired", "none", "alg", "edited", "unsigned", "moved", "text", "iss"]
        )
    )
    if kind == "secret":
        return mint_token(OTHER_SECRET, user, tenant)
    if kind == "expired":
        return mint_token(SECRET, user, tenant, ttl_s=-draw(st.integers(1, 10**8)))
    if kind == "none":
        return jwt.encode(claims, None, algorithm="none")
    if kind == "alg":
        return jwt.encode(claims, SECRET, algorithm="HS384")  # (HS512 warns: short key)
    if kind == "iss":
        issuer = draw(st.text(max_size=10).filter(lambda text: text != ISSUER))
        return jwt.encode({**claims, "iss": issuer}, SECRET, "HS256")
    if kind == "edited":  # any change to the signed text breaks the HMAC
        signed = f"{header}.{payload}"
        at = draw(st.integers(0, len(signed) - 1))
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        new = draw(st.sampled_from(alphabet).filter(lambda c: c != signed[at]))
        return f"{signed[:at]}{new}{signed[at + 1 :]}.{signature}"
    if kind == "unsigned":
        return f"{header}.{payload}."
    if kind == "moved":  # another user's valid signature on this payload
        other = mint_token(SECRET, user + "x", tenant).split(".")[2]
        return f"{header}.{payload}.{other}"
    return draw(st.text(max_size=200))


def _plain(message: Any) -> dict[str, Any]:
    return msgspec.to_builtins(message)  # type: ignore[no-any-return]


base64_data = st.binary(max_size=3 * FRAME_BYTES).map(lambda b: base64.b64encode(b).decode())
client_messages = st.sampled_from(AnyClientMessage.__args__).flatmap(  # type: ignore[attr-defined]
    lambda cls: msgspec_strategy(
        cls,
        token=forged_tokens(),
        data=base64_data | st.text(max_size=20),
        voice=st.sampled_from([*LIMITS.voices, "JOE ", "nope"]) | st.text(max_size=8),
        url=st.sampled_from(["https://example.com/a.png", "http://10.0.0.1/", "file:///etc"]),
    )
)


@st.composite
def mangled_messages(draw: st.DrawFn) -> str:
    """A message with a valid tag, then fields dropped, retyped, added or renamed."""
    obj = _plain(draw(client_messages))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["drop", "retype", "add", "tag"]))
        keys = sorted(k for k in obj if k != "type")
        if op == "drop" and keys:
            obj.pop(draw(st.sampled_from(keys)))
        elif op == "retype" and keys:
            obj[draw(st.sampled_from(keys))] = draw(json_values)
        elif op == "add":
            obj[draw(st.text(max_size=10))] = draw(json_values)
        else:
            obj["type"] = draw(st.sampled_from(sorted(CLIENT_TYPES)) | json_values)
    return frame(**obj)


@st.composite
def huge_frames(draw: st.DrawFn) -> str:
    """Around each size limit, counted in UTF-8 bytes (a multibyte filler is larger)."""
    limit = draw(st.sampled_from([LIMITS.max_message_bytes, LIMITS.max_media_message_bytes]))
    filler = draw(st.sampled_from(["x", "é", "😀"]))
    chars = (limit + draw(st.integers(-64, 64))) // len(filler.encode())
    kind = draw(st.sampled_from(sorted(CLIENT_TYPES)))
    where = draw(st.sampled_from(["text", "conversation_id", "data", "pad"]))
    fields = {"conversation_id": "c", "stream_id": "s", where: filler * max(0, chars)}
    return frame(type=kind, **fields)


frames: st.SearchStrategy[str | bytes] = st.one_of(
    st.binary(max_size=256),
    st.text(max_size=256),
    json_values.map(lambda v: msgspec.json.encode(v).decode()),
    client_messages.map(lambda m: frame(**_plain(m))),
    mangled_messages(),
    huge_frames(),
)

# A ladder, not a range: the depth at which a recursive decoder gives up depends on the
# caller's stack (and hypothesis raises the recursion limit), so a range shrinks flakily.
DEPTHS = [1, 10, 100, 1_000, 10_000]


def nested_frame(depth: int, where: str) -> str:
    inner = "[" * depth + "]" * depth
    match where:
        case "top":
            return inner
        case "unknown field":
            return '{"type":"ping","x":' + inner + "}"
        case "message field":
            return '{"type":"turn.create","conversation_id":"c","parts":' + inner + "}"
        case "objects":
            return '{"type":"ping","x":' + '{"a":' * depth + "1" + "}" * depth + "}"
        case _:  # unclosed
            return '{"type":"ping","x":' + "[" * depth


# ---- properties: any frame -------------------------------------------------------------------
@FUZZ
@given(st.lists(frames, min_size=1, max_size=6), st.booleans())
def test_any_frame_gets_actions_never_an_exception(batch: list[str | bytes], authed: bool) -> None:
    session = new_session(Clock())
    if authed:
        session.open(mint_token(SECRET, "alice", "acme"))
    for raw in batch:
        assert_round_trips(session.receive(raw))


@pytest.mark.parametrize("where", ["top", "unknown field", "message field", "objects", "unclosed"])
@FUZZ
@given(depth=st.sampled_from(DEPTHS), authed=st.booleans())
def test_deeply_nested_frames_get_an_error_not_an_exception(
    where: str, depth: int, authed: bool
) -> None:
    """1000 levels fit in 2 KB, well under the 32 KiB message limit, before any auth."""
    session = new_session(Clock())
    if authed:
        session.open(mint_token(SECRET, "alice", "acme"))
    actions = session.receive(nested_frame(depth, where))
    assert_round_trips(actions)
    assert actions, "a frame always gets an answer or an action"


# ---- properties: authentication --------------------------------------------------------------
def _is_authenticate(raw: str | bytes) -> bool:
    """Whether the session will try this frame's token (what counts as a failed attempt)."""
    if not isinstance(raw, str) or len(raw.encode()) > LIMITS.max_message_bytes:
        return False
    try:
        return isinstance(client_decoder.decode(raw), Authenticate)
    except msgspec.DecodeError:
        return False


@FUZZ
@given(
    st.lists(frames | forged_tokens().map(lambda t: frame(type="session.authenticate", token=t))),
    st.none() | forged_tokens(),
    st.lists(made_up_ids, max_size=3),
)
def test_nothing_happens_before_authentication(
    batch: list[str | bytes], url_token: str | None, turn_ids: list[str]
) -> None:
    """Only `error` and `pong` leave an unauthenticated session; a good token still works
    afterwards, unless forged ones were tried MAX_AUTH_FAILURES times (then it is closed)."""
    clock = Clock()
    session = new_session(clock)
    actions = session.open(url_token)
    failures = int(url_token is not None)
    for raw in batch:
        failures += _is_authenticate(raw)
        actions += session.receive(raw)
    for turn_id in turn_ids:  # the relay and the shell know of no turn of this session
        event = TurnStarted(turn_id=turn_id, worker_id="w", model="m")
        actions += session.relay(event) + session.submit_succeeded(turn_id)
    assert_round_trips(actions)
    for action in actions:
        assert isinstance(action, Send | Close), action
        if isinstance(action, Send):
            assert isinstance(action.event, ErrorEvent | Pong), action.event
    closes = [a for a in actions if isinstance(a, Close)]
    assert not closes or failures >= MAX_AUTH_FAILURES
    assert not session.authenticated and session.open_turns == []

    good = session.receive(frame(type="session.authenticate", token=mint_token(SECRET, "bob")))
    if failures >= MAX_AUTH_FAILURES:
        assert not session.authenticated and isinstance(good[0].event, ErrorEvent)  # type: ignore[union-attr]
    else:
        assert good == [Send(SessionReady("s", "edge-1", "bob", "default"))]


def _unchanged(original: str, edited: str) -> bool:
    """Whether `edited` carries the very signed text and signature bytes of `original`
    (at most padded with base64 `=`, which some issuers add: same bytes)."""
    signed, _, signature = original.rpartition(".")
    e_signed, dot, e_signature = edited.rpartition(".")
    return bool(dot) and e_signed == signed and e_signature.rstrip("=") == signature


@st.composite
def tampered(draw: st.DrawFn) -> tuple[str, str, Principal]:
    user, tenant = draw(users), draw(tenants)
    token = mint_token(SECRET, user, tenant)
    edited = token
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(edited)))
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        char = draw(st.sampled_from("AQgw-_=.+/ !") | st.characters())
        if op == "replace" and at < len(edited):
            edited = edited[:at] + char + edited[at + 1 :]
        elif op == "insert":
            edited = edited[:at] + char + edited[at:]
        else:
            edited = edited[:at] + edited[at + 1 :]
    return token, edited, Principal(user, tenant)


@FUZZ
@given(tampered(), st.booleans())
def test_a_tampered_token_never_authenticates(
    case: tuple[str, str, Principal], at_open: bool
) -> None:
    token, edited, principal = case
    session = new_session(Clock())
    if at_open:
        actions = session.open(edited)
    else:
        actions = session.receive(frame(type="session.authenticate", token=edited))
    assert_round_trips(actions)
    if session.authenticated:
        assert _unchanged(token, edited), f"{edited!r} authenticated"
        assert session.principal is not None and session.principal.owner == principal.owner
    else:
        [error] = actions
        assert isinstance(error, Send) and isinstance(error.event, ErrorEvent)
        assert error.event.code in AUTH_CODES


@FUZZ
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "sub": users | json_values,
            "tenant": tenants | json_values,
            "exp": st.integers(-3600, 3600),
            "iss": st.just(ISSUER) | st.text(max_size=10),
        },
    ),
    st.sampled_from(["HS256", "HS384"]),
)
def test_claims_signed_with_the_edge_secret_are_still_checked(
    claims: dict[str, Any], algorithm: str
) -> None:
    """A token the edge could have signed is accepted only with HS256, the issuer, an
    `exp` in the future, a non-empty string `sub` and a tenant fit for Redis key names."""
    if "exp" in claims:  # a minute from the boundary: the test's own run time never matters
        claims["exp"] += int(time.time()) + (60 if claims["exp"] >= 0 else -60)
    token = jwt.encode(claims, SECRET, algorithm=algorithm)
    session = new_session(Clock())
    assert_round_trips(session.open(token))
    tenant = claims.get("tenant", "default")
    valid = (
        algorithm == "HS256"
        and claims.get("iss") == ISSUER
        and isinstance(claims.get("exp"), int)
        and claims["exp"] > time.time()
        and isinstance(claims.get("sub"), str)
        and claims["sub"] != ""
        and isinstance(tenant, str)
        and 1 <= len(tenant) <= 64
        and all(c.isascii() and (c.isalnum() or c in "_.-") for c in tenant)
    )
    assert session.authenticated == valid, claims
    if valid:
        assert session.principal is not None
        assert (session.principal.user_id, session.principal.tenant_id) == (claims["sub"], tenant)


# ---- a model of the shell, and sessions of several users --------------------------------------
@dataclass
class Client:
    """One connection: its session and what the test knows it may see."""

    name: str
    session: Session
    user: Principal
    created: set[str] = field(default_factory=set)  # turns its own messages opened
    resumed: set[str] = field(default_factory=set)  # turns the shell let it resume
    named: set[str] = field(default_factory=set)  # turn ids its client wrote in messages
    unacked: list[str] = field(default_factory=list)  # SubmitTurns the shell has not answered
    resuming: list[tuple[str, Any]] = field(default_factory=list)  # (turn, after) to load

    @property
    def owned(self) -> set[str]:
        return self.created | self.resumed


@dataclass(frozen=True)
class Turn:
    client: str
    owner: str
    user: Principal
    conversation_id: str


class World:
    """Sessions on one edge, the shell's conversation claims and turn registry, the relay."""

    def __init__(self, users: dict[str, Principal]) -> None:
        self.clock = Clock()
        self.clients: dict[str, Client] = {}
        for name, user in users.items():
            session = new_session(self.clock, name)
            actions = session.open(mint_token(SECRET, user.user_id, user.tenant_id))
            assert isinstance(actions[0], Send) and isinstance(actions[0].event, SessionReady)
            self.clients[name] = Client(name, session, user)
        self.turns: dict[str, Turn] = {}  # every turn any session opened
        self.claims: dict[tuple[str, str], str] = {}  # (tenant, conversation) → owner
        self.latest: dict[tuple[str, str], str] = {}  # (tenant, conversation) → turn
        self.relayed: list[tuple[AnyEvent, Any]] = []  # (event, position), in relay order
        self.log: dict[str, list[tuple[AnyEvent, Any]]] = {}  # logged frames per turn
        self.pending_vad: tuple[Client, DetectSpeech] | None = None  # frames to score

    # -- calls, each followed by every check ---------------------------------------------------
    def call(self, client: Client, what: str, *args: Any) -> list[Action]:
        before = set(client.session.open_turns)
        actions = getattr(client.session, what)(*args)
        self.check(client, actions, before, opened_by_resume=what == "resume_found")
        self.follow(client, actions)
        return actions

    def check(
        self, client: Client, actions: list[Action], before: set[str], *, opened_by_resume: bool
    ) -> None:
        assert_round_trips(actions)
        session, user = client.session, client.user
        for action in actions:
            if isinstance(action, SubmitTurn):
                turn = action.turn
                assert (turn.tenant_id, turn.user_id) == (user.tenant_id, user.user_id), turn
                assert action.owner == user.owner
                self._adopt(client, turn.turn_id, turn.conversation_id)
        # routes opened now are its user's new turns, or (resume_found) the turn it resumed
        for turn_id in set(session.open_turns) - before - client.owned:
            assert not opened_by_resume, f"{turn_id} opened by a resume the shell did not pass"
            self._adopt(client, turn_id, None)
        assert set(session.open_turns) <= client.owned
        withdrawn = session._withdrawn_count()  # voice-loop guesses closing: not counted
        assert len(session.open_turns) - withdrawn <= LIMITS.max_open_turns

        for action in actions:
            match action:
                case Send(event=ErrorEvent(turn_id=turn_id)) if turn_id is not None:
                    assert turn_id in client.owned | client.named, action
                case Send(event=event) if getattr(event, "turn_id", None) is not None:
                    assert event.turn_id in client.owned, f"{client.name} got {event!r}"
                case RequestCancel(turn_id=turn_id) | DropAudio(turn_id=turn_id):
                    assert turn_id in client.owned, action
                case PublishTruncation(event=event) | RecordSpeech(event=event):
                    assert event.turn_id in client.owned, action
                    assert (event.tenant_id, event.user_id) == (user.tenant_id, user.user_id)
                case GiveFeedback():  # the shell checks the turn's recorded user against these
                    assert (action.tenant_id, action.user_id) == (user.tenant_id, user.user_id)
                case ResumeTurn():  # ... and the turn's recorded owner against these
                    assert (action.owner, action.tenant_id) == (user.owner, user.tenant_id)
                case Send() | SubmitTurn() | Close() | DetectSpeech():
                    pass
                case CheckTurn() | CheckCommand():  # the session's own audio, no turn
                    pass
                case _:  # a newer action for the shell: it must name the session's user
                    self._check_new_action(client, action)

    def _check_new_action(self, client: Client, action: Any) -> None:
        user = client.user
        names_user = False
        for attr, mine in (
            ("owner", user.owner),
            ("tenant_id", user.tenant_id),
            ("user_id", user.user_id),
        ):
            if hasattr(action, attr):
                assert getattr(action, attr) == mine, f"{action!r} names someone else"
                names_user = True
        turn_id = getattr(action, "turn_id", None)
        if turn_id not in client.owned:
            assert names_user, f"{action!r} acts on a turn without naming the user to check"

    def _adopt(self, client: Client, turn_id: str, conversation_id: str | None) -> None:
        """A turn the session opened for its user. The same user's retry (same conversation
        and client_turn_id) from another connection is the same turn, by design; another
        user's must never be."""
        known = self.turns.get(turn_id)
        assert known is None or known.owner == client.user.owner, f"{turn_id} is {known}'s"
        if known is None or conversation_id is not None:
            conversation = conversation_id or "?"
            self.turns[turn_id] = Turn(client.name, client.user.owner, client.user, conversation)
        client.created.add(turn_id)

    def follow(self, client: Client, actions: list[Action]) -> None:
        """What the shell does next for some actions (the rest it only carries out)."""
        for action in actions:
            if isinstance(action, SubmitTurn):
                client.unacked.append(action.turn.turn_id)
            elif isinstance(action, DetectSpeech):
                self.pending_vad = (client, action)
            elif isinstance(action, ResumeTurn):
                self.shell_resume(client, action)

    def shell_resume(self, client: Client, action: ResumeTurn) -> None:
        """The shell's ownership check for `response.resume` (`TurnDoor._resume`): the
        turn (or the conversation's latest) must exist and be the session user's."""
        turn_id = action.turn_id
        if turn_id is None:
            turn_id = self.latest.get((action.tenant_id, action.conversation_id or ""))
        turn = self.turns.get(turn_id) if turn_id is not None else None
        if turn is None or turn.owner != action.owner:
            self.call(client, "resume_failed", action.turn_id, UnknownTurn("no such turn"))
            return
        assert turn_id is not None
        before = set(client.session.open_turns)
        actions = client.session.resume_found(turn_id, turn.conversation_id, action.after)
        if turn_id in client.session.open_turns:
            client.resumed.add(turn_id)
            client.resuming.append((turn_id, action.after))
        self.check(client, actions, before, opened_by_resume=True)
        self.follow(client, actions)

    def ack(self, client: Client, index: int, broker_up: bool) -> None:
        if not client.unacked:
            return
        turn_id = client.unacked.pop(index % len(client.unacked))
        turn = self.turns[turn_id]
        key = (client.user.tenant_id, turn.conversation_id)
        if self.claims.setdefault(key, client.user.owner) != client.user.owner:
            err: EdgeError = ForbiddenConversation("belongs to another user")
            self.call(client, "submit_failed", turn_id, err)
        elif not broker_up:
            self.call(client, "submit_failed", turn_id, BrokerUnavailable("kafka down"))
        else:
            self.latest[key] = turn_id
            self.call(client, "submit_succeeded", turn_id)

    def relay(self, client: Client, event: AnyEvent, position: Any) -> None:
        """A relayed frame reaches a session: nothing at all unless it is one of its turns."""
        actions = self.call(client, "relay", event, position)
        if event.turn_id not in client.owned:
            assert actions == [], f"{client.name} got {actions} for {event.turn_id}"


# ---- the operations ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Ref:
    """A turn id: one this connection opened, one of its user's (from any connection), one
    of another connection's (its user's other device, or another user), or made up."""

    whose: Literal["mine", "user's", "theirs", "made up"]
    index: int
    made_up: str

    def resolve(self, world: World, client: Client) -> str:
        if self.whose == "mine":
            pool = sorted(client.owned)
        elif self.whose == "user's":
            pool = sorted(t for t, turn in world.turns.items() if turn.owner == client.user.owner)
        elif self.whose == "theirs":
            pool = sorted(t for t, turn in world.turns.items() if turn.client != client.name)
        else:
            pool = []
        turn_id = pool[self.index % len(pool)] if pool else self.made_up
        client.named.add(turn_id)
        return turn_id


@dataclass(frozen=True)
class Op:
    kind: str
    ref: Ref | None = None
    args: tuple[Any, ...] = ()


refs = st.builds(
    Ref,
    st.sampled_from(["mine", "mine", "user's", "theirs", "made up"]),
    st.integers(0, 7),
    made_up_ids,
)
conversations = st.sampled_from(["c1", "c2", "shared"])
voices = st.sampled_from([msgspec.UNSET, None, "joe", "espeak", "klingon"])
positions = st.none() | st.tuples(st.integers(0, 2), st.integers(-1, 12))
creates = st.builds(
    lambda c, t, k, s, ack: Op("create", args=(c, t, k, s, ack)),
    conversations,
    st.text(min_size=1, max_size=12),
    st.none() | st.sampled_from(["k1", "k2"]),
    voices,
    st.sampled_from(["now", "now", "later", "broker down"]),
)
relays = st.builds(
    lambda r, kind, seq, attempt, text, final, pos: Op(
        "relay", r, (kind, seq, attempt, text, final, pos)
    ),
    refs,
    st.sampled_from(["started", "chunk", "chunk", "chunk", "done", "audio", "transcript"]),
    st.integers(-2, 30),
    st.sampled_from(["", "a1", "a2"]),
    st.text(max_size=12),
    st.booleans(),
    positions,
)
# speech and silence as Silero would score them: one `audio.append` of `frames` 32 ms
# frames per segment (8 speech frames start an utterance, 16 silent ones end it, 7 make
# a guess that more speech withdraws)
segments = st.tuples(st.integers(0, 30), st.sampled_from([0.0, 0.3, 0.45, 0.6, 0.95]))
utterances = st.builds(  # speech, then a silence that ends it, guesses its end, or neither
    lambda speech, silence, more: [(speech, 0.95), (silence, 0.0), *more],
    st.integers(8, 30),
    st.sampled_from([3, 8, 16, 30]),
    st.lists(segments, max_size=2),
)
voice = st.builds(
    lambda segments, stream: Op("voice", args=(segments, stream)),
    utterances | st.lists(segments, min_size=1, max_size=5),
    st.sampled_from(["mic", "mic", "mic2"]),
)
resumes = st.builds(
    lambda r, named, c, e, o, load: Op("resume", r, (named, c, e, o, load)),
    refs,
    st.sampled_from(["turn", "turn", "turn", "conversation", "conversation", "both", "neither"]),
    conversations,
    st.one_of(st.integers(0, 3), st.integers(0, 3), st.integers(-2, 2**64), json_values),
    st.one_of(st.integers(-1, 20), st.integers(-1, 20), st.integers(-3, 2**64), json_values),
    st.sampled_from(["now", "later"]),  # when the shell has read the turn's log
)
ops = st.one_of(
    creates,
    creates,
    relays,
    relays,
    relays,
    voice,
    st.builds(lambda i, up: Op("ack", args=(i, up)), st.integers(0, 7), st.booleans()),
    st.builds(lambda r: Op("cancel", r), refs),
    st.builds(
        lambda r, ms: Op("interrupt", r, (ms,)),
        refs,
        st.none() | st.floats(0, 1e6, allow_nan=False),
    ),
    st.builds(
        lambda r, k: Op("feedback", r, (k,)), refs, st.sampled_from(["thumbs_up", "stop", "meh"])
    ),
    st.just(Op("ping")),
    st.builds(
        lambda s, d: Op("update", args=(s, d)),
        voices,
        st.sampled_from([msgspec.UNSET, None, ("c1", "mic"), ("shared", "mic2")]),
    ),
    st.builds(
        lambda s, n, odd: Op("append", args=(s, n, odd)),
        st.sampled_from(["mic", "other"]),
        st.integers(0, 3),
        st.booleans(),
    ),
    resumes,
    resumes,
    st.builds(
        lambda i, status, outcome: Op("load", args=(i, status, outcome)),
        st.integers(0, 7),
        st.sampled_from(["resumed", "restarted", "expired"]),
        st.booleans(),
    ),
    st.builds(lambda i: Op("replay", args=(i,)), st.integers(0, 50)),
    st.builds(lambda r: Op("speech timeout", r), refs),
    st.builds(lambda renew: Op("expire", args=(renew,)), st.sampled_from([True, True, False])),
    st.builds(lambda same: Op("reauth", args=(same,)), st.booleans()),
    st.builds(lambda raw: Op("raw", args=(raw,)), frames),
)


def relay_event(world: World, turn_id: str, kind: str, args: tuple[Any, ...]) -> AnyEvent:
    _, seq, attempt, text, final, _ = args
    turn = world.turns.get(turn_id)
    conversation = turn.conversation_id if turn else "c1"
    user = turn.user if turn else Principal("someone", "acme")
    match kind:
        case "started":
            return TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt=attempt)
        case "chunk":
            return TokenChunk(
                turn_id=turn_id, seq=seq, text=text, emitted_at_ms=1.0, attempt=attempt
            )
        case "audio":
            return SpeechAudio(
                turn_id=turn_id,
                attempt=attempt,
                index=max(seq, 0),
                text=text,
                char_start=0,
                sample_rate=16000,
                pcm=b"\x01\x00" * (seq % 7 * 160),
                final=final,
                stopped="interrupted" if final and seq % 2 else "",
            )
        case "transcript":
            segment = TranscriptSegment(0.0, 1.0, text)
            return InputTranscribed(turn_id=turn_id, text=text, segments=[segment], audio_s=1.0)
    error = ErrorInfo(OUTPUT_CUT, "cut") if final else None
    return TurnCompleted(
        turn_id=turn_id,
        conversation_id=conversation,
        tenant_id=user.tenant_id,
        user_id=user.user_id,
        finish_reason=FinishReason.SAFETY if final else FinishReason.STOP,
        text=text,
        usage=Usage(1, 2),
        timings=Timings(queue_ms=1.0, ttft_ms=2.0, e2e_ms=3.0),
        model="m",
        worker_id="w",
        completed_at_ms=4.0,
        error=error,
    )


def send(world: World, client: Client, **message: Any) -> list[Action]:
    return world.call(client, "receive", frame(**message))


def speech_field(speech: Any) -> dict[str, Any]:
    if speech is msgspec.UNSET:
        return {}
    return {"speech": None if speech is None else {"voice": speech}}


def op_create(world: World, client: Client, op: Op, _: str | None) -> None:
    conversation, text, client_turn_id, speech, ack = op.args
    message: dict[str, Any] = {"conversation_id": conversation, "text": text}
    if client_turn_id is not None:
        message["client_turn_id"] = client_turn_id
    send(world, client, type="turn.create", **message, **speech_field(speech))
    while ack != "later" and client.unacked:  # the shell answers, queued ones too
        world.ack(client, -1, broker_up=ack == "now")


def op_update(world: World, client: Client, op: Op, _: str | None) -> None:
    speech, detection = op.args
    message = speech_field(speech)
    if detection is not msgspec.UNSET:
        message["turn_detection"] = (
            None
            if detection is None
            else {"conversation_id": detection[0], "stream_id": detection[1]}
        )
    send(world, client, type="session.update", **message)


def op_append(world: World, client: Client, op: Op, _: str | None) -> None:
    """A buffered stream's audio (or the voice loop's, left unscored)."""
    stream, count, odd = op.args
    pcm = b"\x10\x00" * (count * FRAME_BYTES // 2) + (b"\x00" if odd else b"")
    send(world, client, type="audio.append", stream_id=stream, data=base64.b64encode(pcm).decode())
    world.pending_vad = None


def op_voice(world: World, client: Client, op: Op, _: str | None) -> None:
    """The microphone stream with turn detection on: each segment one `audio.append`, its
    frames scored `prob` by the shell's VAD and handed back to `voice_activity`."""
    segments, stream = op.args
    detection = client.session._detection
    if detection is None or detection.stream_id != stream:
        update = {"conversation_id": "c1", "stream_id": stream}
        send(world, client, type="session.update", turn_detection=update)
    for count, prob in segments:
        pcm = b"\x10\x00" * (count * FRAME_BYTES // 2)
        world.pending_vad = None
        send(
            world,
            client,
            type="audio.append",
            stream_id=stream,
            data=base64.b64encode(pcm).decode(),
        )
        if world.pending_vad is not None:
            _, detect = world.pending_vad
            world.pending_vad = None
            probs = [prob] * (len(detect.frames) // FRAME_BYTES)
            world.call(client, "voice_activity", detect.stream_id, detect.frames, probs)
        while client.unacked:
            world.ack(client, -1, broker_up=True)


def op_resume(world: World, client: Client, op: Op, turn_id: str | None) -> None:
    named, conversation, epoch, offset, load = op.args
    message: dict[str, Any] = {"epoch": epoch, "offset": offset}
    if named in ("turn", "both"):
        message["turn_id"] = turn_id
    if named in ("conversation", "both"):
        message["conversation_id"] = conversation
    send(world, client, type="response.resume", **message)
    while load == "now" and client.resuming:
        op_load(world, client, Op("load", args=(-1, "resumed", False)), None)


def op_load(world: World, client: Client, op: Op, _: str | None) -> None:
    """The shell has read the resumed turn's log (what was relayed with positions)."""
    if not client.resuming:
        return
    index, status, with_outcome = op.args
    resumed, after = client.resuming.pop(index % len(client.resuming))
    entries = [(e, p) for e, p in world.log.get(resumed, []) if p > after]
    ends = [e for e, _ in world.relayed if e.turn_id == resumed and isinstance(e, TurnCompleted)]
    outcome = ends[0] if ends and with_outcome else None
    world.call(client, "resume_loaded", resumed, ResumePlan(status, after), entries, outcome)


def op_relay(world: World, client: Client, op: Op, turn_id: str | None) -> None:
    """A worker's frame, delivered to every session: only the turn's owners may show it."""
    assert turn_id is not None
    event = relay_event(world, turn_id, op.args[0], op.args)
    raw_position = op.args[5]
    position = None
    if raw_position is not None:
        position = LogPosition(*raw_position)
        if not isinstance(event, SpeechAudio):  # speech is not logged
            world.log.setdefault(turn_id, []).append((event, position))
            world.log[turn_id].sort(key=lambda entry: entry[1])
    world.relayed.append((event, position))
    for other in world.clients.values():
        world.relay(other, event, position)


def op_replay(world: World, client: Client, op: Op, _: str | None) -> None:
    """A frame relayed before, again: duplicated, late, out of order."""
    if world.relayed:
        event, position = world.relayed[op.args[0] % len(world.relayed)]
        world.relay(client, event, position)


def op_speech_timeout(world: World, client: Client, op: Op, turn_id: str | None) -> None:
    if turn_id in client.owned:  # the shell only arms deadlines for its own turns
        world.call(client, "speech_timed_out", turn_id)


def op_expire(world: World, client: Client, op: Op, _: str | None) -> None:
    principal = client.session.principal
    if principal is not None:
        world.clock.ms = max(world.clock.ms, 1000 * (principal.expires_at_s + 1))
    world.clock.ms += 60_000
    if op.args[0]:  # the client learns at its next request, and renews
        send(world, client, type="turn.cancel", turn_id="t")
        op_reauth(world, client, Op("reauth", args=(True,)), None)


def op_reauth(world: World, client: Client, op: Op, _: str | None) -> None:
    """A new token: the session's user's, or (refused) someone else's."""
    user = client.user if op.args[0] else Principal(client.user.user_id + "-x", "acme")
    ttl = int(world.clock.ms / 1000 - time.time()) + 3600
    token = mint_token(SECRET, user.user_id, user.tenant_id, ttl_s=ttl)
    send(world, client, type="session.authenticate", token=token)
    principal = client.session.principal
    assert principal is None or principal.owner == client.user.owner


def op_raw(world: World, client: Client, op: Op, _: str | None) -> None:
    with contextlib.suppress(msgspec.DecodeError):  # an id the client wrote itself
        written = msgspec.json.decode(op.args[0])
        if isinstance(written, dict) and isinstance(written.get("turn_id"), str):
            client.named.add(written["turn_id"])
    world.call(client, "receive", op.args[0])


def op_turn_message(world: World, client: Client, op: Op, turn_id: str | None) -> None:
    """turn.cancel / turn.interrupt / feedback naming a turn, and ping."""
    match op.kind:
        case "cancel":
            send(world, client, type="turn.cancel", turn_id=turn_id)
        case "interrupt":
            extra = {} if op.args[0] is None else {"audio_end_ms": op.args[0]}
            send(world, client, type="turn.interrupt", turn_id=turn_id, **extra)
        case "feedback":
            send(world, client, type="feedback", turn_id=turn_id, kind=op.args[0])
        case _:
            send(world, client, type="ping", id="p1")


OPS: dict[str, Callable[[World, Client, Op, str | None], None]] = {
    "create": op_create,
    "ack": lambda world, client, op, _: world.ack(client, *op.args),
    "cancel": op_turn_message,
    "interrupt": op_turn_message,
    "feedback": op_turn_message,
    "ping": op_turn_message,
    "update": op_update,
    "append": op_append,
    "voice": op_voice,
    "resume": op_resume,
    "load": op_load,
    "relay": op_relay,
    "replay": op_replay,
    "speech timeout": op_speech_timeout,
    "expire": op_expire,
    "reauth": op_reauth,
    "raw": op_raw,
}


def run(world: World, client: Client, op: Op) -> None:
    turn_id = op.ref.resolve(world, client) if op.ref is not None else None
    OPS[op.kind](world, client, op, turn_id)


identities = st.sampled_from(
    [Principal("bob", "acme"), Principal("alice", "other"), Principal("bob", "other")]
)


@FUZZ
@given(
    identities,
    st.booleans(),
    st.lists(st.tuples(st.sampled_from(["a", "a", "a", "a2", "b"]), ops), min_size=8, max_size=40),
)
def test_random_sessions_keep_every_turn_to_its_owner(
    someone_else: Principal, warm: bool, script: list[tuple[str, Op]]
) -> None:
    """Alice on two devices (a, a2) and someone else (b, another user or tenant); `warm`:
    each has an answer streaming before the script starts."""
    alice = Principal("alice", "acme")
    world = World({"a": alice, "a2": alice, "b": someone_else})
    if warm:
        for name, conversation in (("a", "c1"), ("a2", "c2"), ("b", "shared")):
            client = world.clients[name]
            run(world, client, Op("create", args=(conversation, "hi", None, None, "now")))
            [turn_id] = client.created
            for kind in ("started", "chunk"):
                event = relay_event(world, turn_id, kind, (kind, 0, "a1", "Hel", False, None))
                for other in world.clients.values():
                    world.relay(other, event, None)
    for name, op in script:
        run(world, world.clients[name], op)


@FUZZ
@given(
    someone_else=identities,
    conversation=conversations,
    client_turn_id=st.none() | st.sampled_from(["k1"]),
    attempts=st.lists(st.sampled_from(["cancel", "interrupt", "feedback", "resume", "relay"])),
    epoch=json_values,
    offset=json_values,
)
def test_another_users_turn_is_out_of_reach(
    *,
    someone_else: Principal,
    conversation: str,
    client_turn_id: str | None,
    attempts: list[str],
    epoch: Any,
    offset: Any,
) -> None:
    """The same conversation and client_turn_id for both users still makes two turns, and
    nothing alice sends or receives acts on bob's without a check of alice's identity."""
    world = World({"a": Principal("alice", "acme"), "b": someone_else})
    alice, bob = world.clients["a"], world.clients["b"]
    message = {"conversation_id": conversation, "text": "hi"}
    if client_turn_id is not None:
        message["client_turn_id"] = client_turn_id
    for client in (alice, bob):
        world.call(client, "receive", frame(type="turn.create", **message))
        world.ack(client, 0, broker_up=True)
    [bobs] = bob.created
    assert bobs not in alice.created
    alice.named.add(bobs)
    bob_routes = bob.session.open_turns
    for attempt in attempts:
        match attempt:
            case "cancel" | "interrupt":
                actions = world.call(alice, "receive", frame(type=f"turn.{attempt}", turn_id=bobs))
                [error] = actions
                assert isinstance(error, Send) and isinstance(error.event, ErrorEvent)
                assert error.event.code == "unknown_turn"
            case "feedback":
                feedback = frame(type="feedback", turn_id=bobs, kind="thumbs_down")
                [give] = world.call(alice, "receive", feedback)
                assert give == GiveFeedback(bobs, "thumbs_down", "", "acme", "alice")
            case "resume":
                resume = frame(type="response.resume", turn_id=bobs, epoch=epoch, offset=offset)
                world.call(alice, "receive", resume)
                assert bobs not in alice.session.open_turns
            case "relay":
                world.relay(
                    alice, TokenChunk(turn_id=bobs, seq=0, text="bob's", emitted_at_ms=1), None
                )
    assert bob.session.open_turns == bob_routes


@FUZZ
@given(  # weighted towards well-formed resumes of bob's turn, the case that matters most
    turn=st.sampled_from(["theirs", "theirs", "mine", "made up", "invalid", None]),
    conversation=st.sampled_from([None, None, None, "mine", "theirs", "made up", "invalid"]),
    epoch=st.one_of(
        st.integers(0, 3), st.integers(0, 3), st.integers(-(2**70), 2**70), json_values
    ),
    offset=st.one_of(
        st.integers(-1, 9), st.integers(-1, 9), st.integers(-(2**70), 2**70), json_values
    ),
    extra=st.just({}) | st.dictionaries(st.text(max_size=8), json_values, max_size=2),
    frames_after=st.lists(st.sampled_from(["started", "chunk", "done"]), max_size=6),
)
def test_a_forged_resume_never_leaks_another_users_answer(
    *,
    turn: str | None,
    conversation: str | None,
    epoch: Any,
    offset: Any,
    extra: dict[str, Any],
    frames_after: list[str],
) -> None:
    """`response.resume` with any turn/conversation and any (epoch, offset): no exception,
    no frame of bob's turn for alice, whatever the shell then relays."""
    world = World({"a": Principal("alice", "acme"), "b": Principal("bob", "acme")})
    alice, bob = world.clients["a"], world.clients["b"]
    for client, conv in ((alice, "c-alice"), (bob, "c-bob")):
        world.call(client, "receive", frame(type="turn.create", conversation_id=conv, text="q"))
        world.ack(client, 0, broker_up=True)
    [mine], [theirs] = alice.created, bob.created
    choices = {"mine": mine, "theirs": theirs, "made up": "t-123", "invalid": "../" * 30}
    conversation_ids = {"mine": "c-alice", "theirs": "c-bob", "made up": "c-x", "invalid": "a b"}
    message: dict[str, Any] = {**extra, "epoch": epoch, "offset": offset}
    if turn is not None:
        message["turn_id"] = choices[turn]
        alice.named.add(choices[turn])
    if conversation is not None:
        message["conversation_id"] = conversation_ids[conversation]
    message["type"] = "response.resume"
    world.call(alice, "receive", frame(**message))
    for seq, kind in enumerate(frames_after):  # bob's answer goes on; alice's too
        for turn_id in (theirs, mine):
            event = relay_event(world, turn_id, kind, (kind, seq, "", "text", False, None))
            for client in (alice, bob):
                world.relay(client, event, None)
    assert theirs not in alice.session.open_turns

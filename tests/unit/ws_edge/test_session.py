"""The edge's protocol rules, at the event level: no loop, no sockets."""

import msgspec
import pytest

from harness.factories import completed
from schemas.events import TokenChunk, TurnStarted
from ws_edge.actions import Close, RequestCancel, ResolveApiKey, Send, SubmitTurn
from ws_edge.auth import Principal, mint_token
from ws_edge.errors import AuthError, BrokerUnavailable, StoreUnavailable
from ws_edge.media import MediaLimits
from ws_edge.messages import (
    ErrorEvent,
    Pong,
    ResponseDelta,
    ResponseDone,
    ResponseStarted,
    SessionReady,
    TurnAccepted,
)
from ws_edge.session import MAX_AUTH_FAILURES, Session, SessionLimits, turn_id_for

SECRET = "a-test-secret-that-is-long-enough-for-hs256"


def make_session(clock_ms=lambda: 1000.0, max_turn_chars=8000, **limits) -> Session:
    return Session(
        session_id="s1",
        edge_id="edge-1",
        auth_secret=SECRET,
        limits=SessionLimits(media=MediaLimits(max_text_chars=max_turn_chars), **limits),
        clock_ms=clock_ms,
    )


def authed(**limits) -> Session:
    session = make_session(**limits)
    session.open(mint_token(SECRET, "alice", "acme"))
    return session


def frame(**fields) -> str:
    return msgspec.json.encode(fields).decode()


def only_error(actions) -> ErrorEvent:
    assert len(actions) == 1 and isinstance(actions[0], Send), actions
    event = actions[0].event
    assert isinstance(event, ErrorEvent), event
    return event


def test_token_in_url_authenticates_at_open():
    session = make_session()
    [action] = session.open(mint_token(SECRET, "alice", "acme"))
    assert action == Send(SessionReady("s1", "edge-1", "alice", "acme"))


def test_authenticate_message_then_turn():
    session = make_session()
    assert session.open(None) == []
    [ready] = session.receive(frame(type="session.authenticate", token=mint_token(SECRET, "bob")))
    assert isinstance(ready.event, SessionReady) and ready.event.user_id == "bob"
    [submit] = session.receive(frame(type="turn.create", conversation_id="c1", text="hi"))
    assert isinstance(submit, SubmitTurn)
    assert submit.owner == '["default","bob"]'
    assert submit.turn.text == "hi" and submit.turn.edge_id == "edge-1"
    assert submit.turn.submitted_at_ms == 1000.0


def test_turn_before_authentication_is_refused_and_session_survives():
    session = make_session()
    err = only_error(session.receive(frame(type="turn.create", conversation_id="c", text="x")))
    assert err.code == "unauthenticated"
    assert isinstance(session.receive(frame(type="ping", id="p"))[0].event, Pong)


@pytest.mark.parametrize(
    ("token", "code"),
    [
        (mint_token("some-other-secret-of-enough-length-xxxxxx", "eve"), "token_invalid"),
        ("garbage.token.here", "token_invalid"),
        (mint_token(SECRET, "alice", ttl_s=-10), "token_expired"),
        (mint_token(SECRET, "alice", tenant_id="evil:tenant"), "token_invalid"),
        ("", "unauthenticated"),
    ],
)
def test_bad_tokens_get_precise_codes(token, code):
    session = make_session()
    err = only_error(session.receive(frame(type="session.authenticate", token=token)))
    assert err.code == code
    assert not session.authenticated


def test_repeated_auth_failures_close_the_connection():
    session = make_session()
    bad = frame(type="session.authenticate", token="forged")
    for _ in range(MAX_AUTH_FAILURES - 1):
        assert len(session.receive(bad)) == 1
    actions = session.receive(bad)
    assert isinstance(actions[-1], Close) and actions[-1].code == 4401


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("{not json", "malformed_json"),
        ("[]", "invalid_message"),
        ('{"type": 5}', "invalid_message"),
        ('{"type": "turn.explode"}', "unknown_type"),
        (
            '{"type": "turn.create", "conversation_id": "c", "text": "x", "extra": 1}',
            "invalid_message",
        ),
        ('{"type": "turn.create", "conversation_id": "../etc", "text": "x"}', "invalid_message"),
        ('{"type": "turn.create", "conversation_id": "c", "text": ""}', "invalid_message"),
        (
            '{"type": "turn.create", "conversation_id": "c", "text": "x", "max_tokens": 0}',
            "invalid_message",
        ),
        ('{"type": "turn.cancel"}', "invalid_message"),
    ],
)
def test_malformed_messages_get_precise_errors(raw, code):
    session = authed()
    err = only_error(session.receive(raw))
    assert err.code == code, err.message
    assert err.message


def test_unknown_field_error_names_the_field():
    session = authed()
    err = only_error(session.receive(frame(type="ping", id="1", colour="red")))
    assert "colour" in err.message


def test_binary_frames_are_refused():
    assert only_error(authed().receive(b"\x00\x01")).code == "invalid_message"


def test_oversized_message_and_overlong_turn():
    session = authed(max_message_bytes=100, max_media_message_bytes=1000, max_turn_chars=10)
    big = frame(type="turn.cancel", turn_id="x" * 60, pad="p" * 100)
    assert only_error(session.receive(big)).code == "message_too_large"
    huge = frame(type="turn.create", conversation_id="c", text="x" * 2000)
    assert only_error(session.receive(huge)).code == "message_too_large"
    long_text = frame(type="turn.create", conversation_id="c", text="y" * 11)
    assert "limit is 10" in only_error(session.receive(long_text)).message


def test_open_turn_limit_is_retryable():
    session = authed(max_open_turns=1)
    assert isinstance(
        session.receive(frame(type="turn.create", conversation_id="c", text="a"))[0], SubmitTurn
    )
    err = only_error(session.receive(frame(type="turn.create", conversation_id="c", text="b")))
    assert err.code == "too_many_turns" and err.retryable


def _submit(session: Session, text: str = "hello") -> str:
    [submit] = session.receive(frame(type="turn.create", conversation_id="c1", text=text))
    return submit.turn.turn_id


def test_frames_racing_ahead_of_the_ack_are_held_in_order():
    session = authed()
    turn_id = _submit(session)
    assert session.relay(TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt="a")) == []
    assert (
        session.relay(TokenChunk(turn_id=turn_id, seq=0, text="Hel", emitted_at_ms=1, attempt="a"))
        == []
    )
    actions = session.submit_succeeded(turn_id)
    assert [type(a.event) for a in actions] == [TurnAccepted, ResponseStarted, ResponseDelta]
    [delta] = session.relay(
        TokenChunk(turn_id=turn_id, seq=1, text="lo", emitted_at_ms=2, attempt="a")
    )
    assert delta.event == ResponseDelta(turn_id, 1, "lo")


def test_completion_closes_the_route():
    session = authed()
    turn_id = _submit(session)
    session.submit_succeeded(turn_id)
    done = completed(turn_id, conversation_id="c1", text="Hello")
    [action] = session.relay(done)
    assert isinstance(action.event, ResponseDone) and action.event.text == "Hello"
    assert session.open_turns == []
    assert session.relay(done) == []  # late duplicates are ignored


def test_failed_publish_reports_retryable_error_and_frees_the_slot():
    session = authed(max_open_turns=1)
    turn_id = _submit(session)
    err = only_error(session.submit_failed(turn_id, BrokerUnavailable("kafka down")))
    assert err.code == "broker_unavailable" and err.retryable and err.turn_id == turn_id
    assert session.open_turns == []


def test_cancel_only_own_open_turns():
    session = authed()
    turn_id = _submit(session)
    [action] = session.receive(frame(type="turn.cancel", turn_id=turn_id))
    assert action == RequestCancel(turn_id, "c1")
    err = only_error(session.receive(frame(type="turn.cancel", turn_id="someone-elses")))
    assert err.code == "unknown_turn"


def test_client_turn_id_makes_retries_idempotent_per_user():
    from ws_edge.auth import Principal

    alice, bob = Principal("alice", "acme"), Principal("bob", "acme")
    assert turn_id_for(alice, "c", "r1") == turn_id_for(alice, "c", "r1")
    assert turn_id_for(alice, "c", "r1") != turn_id_for(bob, "c", "r1")
    assert turn_id_for(alice, "c", "r1") != turn_id_for(alice, "other", "r1")
    assert turn_id_for(alice, "c", None) != turn_id_for(alice, "c", None)
    # tenant/user pairs that would collide if joined with a separator stay distinct
    assert Principal("c", "a/b").owner != Principal("b/c", "a").owner
    session = authed()
    first = session.receive(
        frame(type="turn.create", conversation_id="c", text="a", client_turn_id="r1")
    )
    dup = session.receive(
        frame(type="turn.create", conversation_id="c", text="a", client_turn_id="r1")
    )
    assert isinstance(first[0], SubmitTurn)
    assert "already in flight" in only_error(dup).message


def test_forged_token_at_open_is_an_error_event_not_an_exception():
    session = make_session()
    err = only_error(session.open("forged.token.value"))
    assert err.code == "token_invalid" and not session.authenticated


def test_turns_of_one_conversation_are_published_one_at_a_time_in_order():
    session = authed()
    create = lambda conv, text: frame(type="turn.create", conversation_id=conv, text=text)  # noqa: E731
    [first] = session.receive(create("c1", "one"))
    assert session.receive(create("c1", "two")) == []  # waits for the first's ack
    assert session.receive(create("c1", "three")) == []
    [other] = session.receive(create("c2", "elsewhere"))  # other conversations don't wait
    assert isinstance(other, SubmitTurn)
    accepted, second = session.submit_succeeded(first.turn.turn_id)
    assert isinstance(accepted.event, TurnAccepted) and second.turn.text == "two"
    error, third = session.submit_failed(second.turn.turn_id, BrokerUnavailable("down"))
    assert error.event.code == "broker_unavailable" and third.turn.text == "three"
    assert session.submit_succeeded(third.turn.turn_id)[-1] == Send(
        TurnAccepted(third.turn.turn_id, "c1")
    )


def test_a_redelivered_turn_tells_the_client_to_start_over():
    from ws_edge.messages import ResponseRestarted

    session = authed()
    turn_id = _submit(session)
    session.submit_succeeded(turn_id)
    session.relay(TurnStarted(turn_id=turn_id, worker_id="w1", model="m", attempt="a1"))
    session.relay(TokenChunk(turn_id=turn_id, seq=0, text="Hal", emitted_at_ms=1, attempt="a1"))
    restarted, started = session.relay(
        TurnStarted(turn_id=turn_id, worker_id="w2", model="m", attempt="a2")
    )
    assert restarted.event == ResponseRestarted(turn_id, "worker_failover")
    assert isinstance(started.event, ResponseStarted)


def test_an_expired_token_ends_the_session_until_a_new_one_comes():
    now = [1000.0]
    session = make_session(clock_ms=lambda: now[0] * 1000)
    session.open(mint_token(SECRET, "alice", ttl_s=3600))  # exp ≈ real time + 1 h
    now[0] = session.principal.expires_at_s + 1
    err = only_error(session.receive(frame(type="turn.create", conversation_id="c", text="x")))
    assert err.code == "token_expired" and not session.authenticated


def test_duplicate_token_frames_are_dropped():
    session = authed()
    turn_id = _submit(session)
    session.submit_succeeded(turn_id)
    chunk = TokenChunk(turn_id=turn_id, seq=0, text="a", emitted_at_ms=1)
    assert len(session.relay(chunk)) == 1
    assert session.relay(chunk) == []


def test_answers_to_turn_create_echo_the_client_turn_id():
    session = authed(max_turn_chars=3)
    long = frame(type="turn.create", conversation_id="c", text="toolong", client_turn_id="k1")
    assert only_error(session.receive(long)).client_turn_id == "k1"
    [submit] = session.receive(
        frame(type="turn.create", conversation_id="c", text="ok", client_turn_id="k2")
    )
    [accepted] = session.submit_succeeded(submit.turn.turn_id)
    assert accepted.event.client_turn_id == "k2"
    [submit] = session.receive(
        frame(type="turn.create", conversation_id="c", text="ok", client_turn_id="k3")
    )
    failed = only_error(session.submit_failed(submit.turn.turn_id, BrokerUnavailable("down")))
    assert failed.client_turn_id == "k3" and failed.turn_id == submit.turn.turn_id


def test_a_failover_is_noticed_even_when_the_new_start_frame_was_lost():
    from ws_edge.messages import ResponseRestarted

    session = authed()
    turn_id = _submit(session)
    session.submit_succeeded(turn_id)
    session.relay(TurnStarted(turn_id=turn_id, worker_id="w1", model="m", attempt="a1"))
    for seq in range(3):
        session.relay(TokenChunk(turn_id=turn_id, seq=seq, text="x", emitted_at_ms=1, attempt="a1"))
    restarted, delta = session.relay(
        TokenChunk(turn_id=turn_id, seq=0, text="Fresh", emitted_at_ms=2, attempt="a2")
    )
    assert isinstance(restarted.event, ResponseRestarted)
    assert delta.event == ResponseDelta(turn_id, 0, "Fresh")


def test_a_renewed_token_must_name_the_same_user():
    now = [0.0]
    session = make_session(clock_ms=lambda: now[0])
    session.open(mint_token(SECRET, "alice", "acme"))
    now[0] = (session.principal.expires_at_s + 1) * 1000
    err = only_error(session.receive(frame(type="turn.create", conversation_id="c", text="x")))
    assert err.code == "token_expired"
    steal = frame(type="session.authenticate", token=mint_token(SECRET, "mallory", "acme"))
    assert only_error(session.receive(steal)).code == "token_invalid"
    renew = frame(type="session.authenticate", token=mint_token(SECRET, "alice", "acme"))
    [ready] = session.receive(renew)
    assert isinstance(ready.event, SessionReady) and ready.event.user_id == "alice"


def test_feedback_names_the_principal_for_the_shell_to_check():
    from ws_edge.actions import GiveFeedback

    session = authed()
    [action] = session.receive(frame(type="feedback", turn_id="t1", kind="thumbs_up"))
    assert action == GiveFeedback("t1", "thumbs_up", "", "acme", "alice")
    err = only_error(session.receive(frame(type="feedback", turn_id="t1", kind="meh")))
    assert err.code == "invalid_message"
    assert only_error(make_session().receive(frame(type="feedback", turn_id="t", kind="stop")))


def test_a_cut_answer_is_retracted_before_it_is_done():
    from schemas.events import ErrorInfo, FinishReason
    from ws_edge.messages import ResponseDone, ResponseRetracted

    session = authed()
    turn_id = _submit(session)
    session.submit_succeeded(turn_id)
    session.relay(TurnStarted(turn_id=turn_id, worker_id="w1", model="m", attempt="a1"))
    for seq, text in enumerate(["Sure, ", "here is "]):
        session.relay(
            TokenChunk(turn_id=turn_id, seq=seq, text=text, emitted_at_ms=1, attempt="a1")
        )
    cut = completed(
        turn_id,
        finish_reason=FinishReason.SAFETY,
        text="I can't help with that.",
        error=ErrorInfo("output_cut", "the answer broke the content policy"),
    )
    retracted, done = session.relay(cut)
    assert retracted.event == ResponseRetracted(
        turn_id, "output_cut", "I can't help with that.", len("Sure, here is ")
    )
    assert isinstance(done.event, ResponseDone) and done.event.text == "I can't help with that."


def test_an_answer_that_was_not_cut_is_not_retracted():
    from schemas.events import ErrorInfo, FinishReason
    from ws_edge.messages import ResponseDone

    session = authed()
    turn_id = _submit(session)
    session.submit_succeeded(turn_id)
    blocked = completed(
        turn_id, finish_reason=FinishReason.SAFETY, text="", error=ErrorInfo("input_blocked", "no")
    )
    [done] = session.relay(blocked)
    assert isinstance(done.event, ResponseDone)


@pytest.mark.parametrize("penalty", [0.0, 0.8, 1.1])
def test_turns_get_the_deployments_frequency_penalty(penalty):
    """TURNSTREAM_DEFAULT_FREQUENCY_PENALTY reaches every turn the edge submits (it is what
    keeps the bundled model from looping: tests/integration/test_bundled_decoding.py)."""
    session = authed(default_frequency_penalty=penalty)
    [submit] = session.receive(frame(type="turn.create", conversation_id="c1", text="a poem"))
    assert isinstance(submit, SubmitTurn)
    assert submit.turn.decoding.frequency_penalty == penalty
    assert submit.turn.decoding.repetition_penalty == 1.0  # prompt tokens are not penalised


def test_the_default_penalty_is_the_settings_default():
    from runtime.settings import Settings

    assert SessionLimits().default_frequency_penalty == Settings().default_frequency_penalty


def test_a_turn_carries_the_clients_history_instructions_and_sampling():
    session = authed()
    [submit] = session.receive(
        frame(
            type="turn.create",
            conversation_id="c1",
            text="And of Italy?",
            history=[
                {"role": "user", "content": "Capital of France?"},
                {"role": "assistant", "content": "Paris."},
            ],
            instructions="Be brief.",
            top_p=0.5,
            seed=3,
            stop=["\n\n"],
        )
    )
    turn = submit.turn
    assert [(m.role, m.content) for m in turn.history] == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
    ]
    assert turn.instructions == "Be brief."
    assert (turn.decoding.top_p, turn.decoding.seed, turn.decoding.stop) == (0.5, 3, ["\n\n"])
    [plain] = session.receive(frame(type="turn.create", conversation_id="c2", text="hi"))
    assert plain.turn.history is None  # the server's own history


def test_a_carried_history_is_held_to_the_servers_history_limit():
    session = authed(max_history_chars=20)
    long = [{"role": "user", "content": "x" * 15}, {"role": "assistant", "content": "y" * 10}]
    error = only_error(
        session.receive(frame(type="turn.create", conversation_id="c1", text="hi", history=long))
    )
    assert error.code == "media_too_large" and "25 characters" in error.message


def test_an_api_key_is_looked_up_by_the_shell_then_admitted_or_refused():
    session = make_session()
    assert session.open("tsk-abc") == [ResolveApiKey("tsk-abc")]
    assert not session.authenticated
    [ready] = session.admit(Principal("bob", "acme"))
    assert isinstance(ready.event, SessionReady) and session.authenticated
    # a renewal by another user's key is refused: a session keeps its user
    assert only_error(session.admit(Principal("eve", "acme"))).code == "token_invalid"

    refused = make_session()
    assert only_error(refused.key_refused(StoreUnavailable("down"))).code == "store_unavailable"
    for _ in range(MAX_AUTH_FAILURES - 1):
        only_error(refused.key_refused(AuthError("revoked", code="key_revoked")))
    *_, close = refused.key_refused(AuthError("revoked", code="key_revoked"))
    assert isinstance(close, Close)


def test_a_response_format_rides_on_the_turns_decoding_or_is_refused_before_acceptance():
    session = authed(max_schema_bytes=200)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}
    [submit] = session.receive(
        frame(type="turn.create", conversation_id="c1", text="hi", response_format=fmt)
    )
    assert submit.turn.decoding.response_format.type == "json_schema"
    assert msgspec.json.decode(submit.turn.decoding.response_format.schema) == schema
    big = {**fmt, "json_schema": {"name": "city", "schema": {**schema, "description": "x" * 300}}}
    error = only_error(
        session.receive(
            frame(type="turn.create", conversation_id="c2", text="hi", response_format=big)
        )
    )
    assert error.code == "invalid_response_format"
    [plain] = session.receive(frame(type="turn.create", conversation_id="c3", text="hi"))
    assert plain.turn.decoding.response_format is None

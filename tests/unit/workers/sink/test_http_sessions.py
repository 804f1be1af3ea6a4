"""HTTP sessions: one connection per session id, one request at a time, ended after their
timeout, created unless the request says it must exist."""

from __future__ import annotations

import pytest

from runtime.clickhouse.http_transport import SessionAsk
from workers.sink.http import sessions as sessions_module
from workers.sink.http.engine import EngineError
from workers.sink.http.sessions import SESSION_IS_LOCKED, SESSION_NOT_FOUND, Sessions


class Conn:
    made = 0

    def __init__(self) -> None:
        Conn.made += 1
        self.number = Conn.made
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_session_keeps_its_connection_between_requests():
    sessions = Sessions(Conn, Clock())
    with sessions.use(SessionAsk("a", 60, False), "default") as first:
        pass
    with sessions.use(SessionAsk("a", 60, True), "default") as again:
        assert again is first and not again.closed
    with sessions.use(SessionAsk("b", 60, False), "default") as other:
        assert other is not first
    assert len(sessions) == 2


def test_a_second_request_while_one_runs_is_locked_out():
    sessions = Sessions(Conn, Clock())
    with (
        sessions.use(SessionAsk("a", 60, False), "default"),
        pytest.raises(EngineError) as locked,
        sessions.use(SessionAsk("a", 60, False), "default"),
    ):
        pass
    assert locked.value.number == SESSION_IS_LOCKED
    with sessions.use(SessionAsk("a", 60, False), "default"):
        pass  # free again once the first ended


def test_an_unknown_or_ended_session_is_not_found_when_checked():
    clock = Clock()
    sessions = Sessions(Conn, clock)
    with pytest.raises(EngineError) as unknown, sessions.use(SessionAsk("a", 60, True), "default"):
        pass
    assert unknown.value.number == SESSION_NOT_FOUND
    with sessions.use(SessionAsk("a", 10, False), "default") as conn:
        pass
    clock.now = 10.5  # past the timeout its last request set
    with pytest.raises(EngineError), sessions.use(SessionAsk("a", 10, True), "default"):
        pass
    assert conn.closed and len(sessions) == 0


def test_the_longest_idle_session_makes_room(monkeypatch):
    monkeypatch.setattr(sessions_module, "MAX_SESSIONS", 2)
    clock = Clock()
    sessions = Sessions(Conn, clock)
    with sessions.use(SessionAsk("old", 600, False), "default") as old:
        pass
    clock.now = 1
    with sessions.use(SessionAsk("new", 600, False), "default"):
        pass
    with sessions.use(SessionAsk("third", 600, False), "default"):
        assert old.closed and len(sessions) == 2
    sessions.close()
    assert len(sessions) == 0

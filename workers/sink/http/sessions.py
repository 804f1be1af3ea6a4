"""HTTP sessions (`session_id`), as a server keeps them: a session is one engine connection
kept between requests, so its SETs, USE and temporary tables carry over; it ends
`session_timeout` seconds (60 by default) after its last request ends. One request at a
time: a second one while a request runs is SESSION_IS_LOCKED; `session_check=1` for an
unknown or ended session is SESSION_NOT_FOUND. clickhouse-connect sends a session id with
every request by default, so sessions are the common case, not an exotic one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from runtime.clickhouse.http_transport import SessionAsk
from workers.sink.http.engine import EngineError

SESSION_NOT_FOUND = 372
SESSION_IS_LOCKED = 373
MAX_SESSIONS = 256  # beyond this the longest-idle free session is closed first


@dataclass
class _Session:
    conn: Any
    timeout_s: int
    idle_since: float
    busy: bool = False


class Sessions:
    """Open sessions by id; thread-safe (requests run on the server's query threads)."""

    def __init__(self, connect: Callable[[], Any], clock: Callable[[], float] = time.monotonic):
        self._connect = connect
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], _Session] = {}

    @contextmanager
    def use(self, ask: SessionAsk, user: str) -> Iterator[Any]:
        """The session's connection for one request; created unless `ask.check`. Sessions
        are per user: another user naming the same id has a session of its own."""
        session = self._take(ask, (user, ask.session_id))
        try:
            yield session.conn
        finally:
            with self._lock:
                session.busy = False
                session.timeout_s = ask.timeout_s
                session.idle_since = self._clock()

    def _take(self, ask: SessionAsk, key: tuple[str, str]) -> _Session:
        expired: list[_Session] = []
        try:
            with self._lock:
                expired = self._expire()
                session = self._open.get(key)
                if session is None:
                    if ask.check:
                        raise EngineError(SESSION_NOT_FOUND, f"Session {ask.session_id} not found")
                    expired += self._make_room()
                    session = _Session(self._connect(), ask.timeout_s, self._clock())
                    self._open[key] = session
                elif session.busy:
                    raise EngineError(
                        SESSION_IS_LOCKED,
                        f"Session {ask.session_id} is locked by a concurrent client",
                    )
                session.busy = True
                return session
        finally:
            for old in expired:
                old.conn.close()

    def _expire(self) -> list[_Session]:
        now = self._clock()
        ended = [
            key
            for key, session in self._open.items()
            if not session.busy and now - session.idle_since > session.timeout_s
        ]
        return [self._open.pop(key) for key in ended]

    def _make_room(self) -> list[_Session]:
        if len(self._open) < MAX_SESSIONS:
            return []
        free = [(s.idle_since, key) for key, s in self._open.items() if not s.busy]
        if not free:
            raise EngineError(SESSION_IS_LOCKED, f"Too many sessions in use ({MAX_SESSIONS})")
        return [self._open.pop(min(free)[1])]

    def __len__(self) -> int:
        return len(self._open)

    def close(self) -> None:
        with self._lock:
            sessions, self._open = list(self._open.values()), {}
        for session in sessions:
            session.conn.close()

"""Answer chunks joined per turn so a streaming answer sends at most one frame per pace.

Why: every chunk relayed costs the same wherever it goes (an encode and a script call in the
worker, an `XADD` and a `PUBLISH` in Redis, a decode and a WebSocket frame at the edge, a
parse in the client) whatever text it carries; at one token per chunk that is most of what
a turn costs the pipeline (docs/cost.md). With a pace, a turn's first chunk, and any chunk
that comes after a quiet pace, goes at once; chunks that come sooner are joined into one
that leaves when the pace since the last send is up. So the delay added to a token is at
most the pace, and only when tokens come faster than it. Joined chunks keep the first one's
`seq` (the protocol says a skipped `seq` means joined text, never lost text).

Pure: times are passed in (seconds, any monotonic clock); the relay owns the timers.
"""

from __future__ import annotations

import msgspec

from schemas.events import TokenChunk

Key = tuple[str, str]  # (channel, turn id)


class DeltaPacer:
    def __init__(self, pace_s: float) -> None:
        if pace_s <= 0:
            raise ValueError("a pace must be positive (0 means no pacer)")
        self.pace_s = pace_s
        self._last_sent: dict[Key, float] = {}
        self._held: dict[Key, TokenChunk] = {}

    def offer(self, key: Key, chunk: TokenChunk, now: float) -> tuple[list[TokenChunk], float]:
        """What goes now (in order) and, when something of this turn waits, when it is due
        (`inf` when nothing does)."""
        held = self._held.get(key)
        if held is not None:
            if _joinable(held, chunk):
                self._held[key] = msgspec.structs.replace(held, text=held.text + chunk.text)
                return [], self._last_sent[key] + self.pace_s
            del self._held[key]  # another attempt or call: the held one goes first
            self._last_sent[key] = now
            self._held[key] = chunk
            return [held], now + self.pace_s
        last = self._last_sent.get(key)
        if last is None or now - last >= self.pace_s:
            self._last_sent[key] = now
            return [chunk], float("inf")
        self._held[key] = chunk
        return [], last + self.pace_s

    def due(self, key: Key, now: float) -> TokenChunk | None:
        """The turn's held chunk, if any, once its time came (the relay's timer)."""
        held = self._held.pop(key, None)
        if held is not None:
            self._last_sent[key] = now
        return held

    def before(self, key: Key, *, ends: bool) -> TokenChunk | None:
        """Another frame of the turn is about to go: the held chunk goes before it.
        `ends`: it is the turn's last frame, so the turn is forgotten."""
        held = self._held.pop(key, None)
        if ends:
            self._last_sent.pop(key, None)
        return held

    def drain(self) -> list[tuple[Key, TokenChunk]]:
        """Every held chunk, at once (the relay is flushing before it stops)."""
        held, self._held = list(self._held.items()), {}
        return held

    def forget_before(self, horizon: float) -> None:
        """Drop send times older than `horizon` for turns holding nothing (turns that ended
        without a last frame here: a crash, another worker took over)."""
        self._last_sent = {
            key: at for key, at in self._last_sent.items() if at >= horizon or key in self._held
        }

    def __len__(self) -> int:
        return len(self._last_sent)


def _joinable(held: TokenChunk, chunk: TokenChunk) -> bool:
    return held.attempt == chunk.attempt and held.call_index == chunk.call_index

"""Publishing frames to the edges over Redis pub/sub, batched without adding latency, and
logged for resumption in the same atomic step.

One awaited PUBLISH per token caps near 7k msgs/s per connection (docs/architecture.md §3).
Instead, frames queue in memory and a single sender task ships everything queued in one pipelined
round trip: per turn, one call of `RELAY_SCRIPT` that appends its response frames to the
turn's log (`schemas.turn_log`: a capped stream whose ids are the positions clients resume
from) and publishes them, positions attached, to the edge that accepted the turn and to
every edge watching it (a client that resumed or joined elsewhere). While a round trip is
in flight the next batch builds up ("natural batching"): no timer, so an idle system sends
each frame at once and a busy one sends bigger batches. Order is preserved per process, so
a turn's frames arrive in order.

Why one script: an edge that starts watching a turn adds itself to the watchers, then
reads the log. Each frame is logged and published atomically, so it was either in the log
before that read or is published to the new edge after it: no gap; positions drop the
frames it gets twice.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from schemas.channels import RedisNames
from schemas.codec import encode
from schemas.events import Event, TokenChunk
from schemas.turn_log import FINAL, NOT_LOGGED, log_kind
from workers.runtime.delta_pacing import DeltaPacer, Key
from workers.runtime.errors import WorkerError

log = logging.getLogger("turnstream.relay")

MAX_REMEMBERED_TURNS = 10_000  # TTL refresh times kept before the stale ones are dropped


# KEYS: the turn's log, epochs hash, watchers set, live-attempt lease (pushed forward with
# the TTL, dropped at the end). ARGV: the accepting edge's channel, the
# log's cap, its TTL while live and once finished, whether to push the live TTL forward
# ('1': the relay does it every few seconds per turn, not per token), the lease in ms, then
# (kind, payload) per frame
# (kinds: `schemas.turn_log`). Frames of an attempt whose epoch the log has moved past (a
# worker that lost the turn but still streams) fail XADD and are not shown.
RELAY_SCRIPT = """
local log, epochs, watchers, live = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local origin, maxlen = ARGV[1], ARGV[2]
local live_ttl, done_ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
local refresh = ARGV[5] == '1'
local lease_ms = tonumber(ARGV[6])
-- the current epoch and the first attempt's own in one read (a batch is often one token)
local known_epochs, first = {}, nil
for i = 7, #ARGV, 2 do
  if string.sub(ARGV[i], 1, 2) == 'a:' then first = ARGV[i]; break end
end
local cur
if first then
  local got = redis.call('HMGET', epochs, 'cur', first)
  cur = tonumber(got[1] or '0')
  if got[2] then known_epochs[first] = tonumber(got[2]) end
else
  cur = tonumber(redis.call('HGET', epochs, 'cur') or '0')
end
local items = {}
local logged, finished = false, false
for i = 7, #ARGV, 2 do
  local kind, payload = ARGV[i], ARGV[i + 1]
  if kind == '<NOT_LOGGED>' then
    items[#items + 1] = payload
  else
    local epoch = cur
    if string.sub(kind, 1, 2) == 'a:' then
      local known = known_epochs[kind]
      if known == nil and kind ~= first then
        local got = redis.call('HGET', epochs, kind)
        if got then known = tonumber(got) end
      end
      if known then
        epoch = known
      else
        epoch = redis.call('HINCRBY', epochs, 'count', 1)
        redis.call('HSET', epochs, kind, epoch, 'cur', epoch)
        cur = epoch
      end
      known_epochs[kind] = epoch
    end
    local id = redis.pcall('XADD', log, 'MAXLEN', '~', maxlen, epoch .. '-*', 'e', payload)
    if type(id) == 'string' then
      local e, o = string.match(id, '^(%d+)-(%d+)$')
      items[#items + 1] = '[' .. e .. ',' .. o .. ',' .. payload .. ']'
      logged = true
      if kind == '<FINAL>' then finished = true end
    end
  end
end
if logged and (finished or refresh) then
  redis.call('EXPIRE', log, finished and done_ttl or live_ttl)
  redis.call('EXPIRE', epochs, live_ttl)
  -- the live attempt's lease: a worker handed the turn while this one still streams (a
  -- false failover) waits for it instead of restarting the answer (attempt_lease.py)
  if finished then redis.call('DEL', live) else redis.call('PEXPIRE', live, lease_ms) end
end
if #items == 0 then return 0 end
local message = '[' .. table.concat(items, ',') .. ']'
redis.call('PUBLISH', origin, message)
for _, channel in ipairs(redis.call('SMEMBERS', watchers)) do
  if channel ~= origin then redis.call('PUBLISH', channel, message) end
end
return #items
""".replace("<NOT_LOGGED>", NOT_LOGGED).replace("<FINAL>", FINAL)


@dataclass(frozen=True, slots=True)
class LogLimits:
    """How much of a turn's frames its log keeps, and for how long (settings: RESUME_*).
    A live log's expiry is pushed forward on a turn's first batch, then at most every
    `ttl_refresh_s` (two EXPIREs per token were a fifth of a turn's Redis commands); the
    final frame always sets the short one."""

    max_entries: int = 20_000
    live_ttl_s: int = 600
    done_ttl_s: int = 60
    ttl_refresh_s: float = 5.0

    @property
    def attempt_lease_s(self) -> float:
        """How long an attempt's lease lasts unless pushed forward (with each TTL push, so
        at least every `ttl_refresh_s` while it streams): a refresh period and a half."""
        return 1.5 * self.ttl_refresh_s


class RelayOverflow(WorkerError, RuntimeError):
    """More frames are queued than the relay may hold (Redis down for too long)."""

    code = "relay_overflow"
    retryable = True


class RelayFailed(WorkerError, RuntimeError):
    """Redis refused a batch for good (not an outage)."""

    code = "relay_failed"


class RelayPublisher:
    def __init__(
        self,
        redis: Redis,
        names: RedisNames,
        *,
        limits: LogLimits = LogLimits(),
        max_pending: int = 100_000,
        pace_s: float = 0.0,
    ) -> None:
        self._redis = redis
        self._names = names
        self._limits = limits
        # The script's sha once this process loaded it (SCRIPT LOAD once, then bare EVALSHAs:
        # a pipeline that runs a registered Script asks SCRIPT EXISTS first, a round trip per
        # batch, which at one stream is one per token). None again when Redis answers
        # NOSCRIPT (its cache was flushed).
        self._sha: str | None = None
        # when each turn's live TTL was last pushed forward by this process (monotonic s)
        self._refreshed: dict[str, float] = {}
        self._pending: list[_Frame] = []
        self._max_pending = max_pending
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        # answer chunks joined per turn, at most one frame per pace (delta_pacing.py); off at 0
        self._pacer = DeltaPacer(pace_s) if pace_s > 0 else None
        self._timers: dict[Key, asyncio.TimerHandle] = {}

    @property
    def attempt_lease_s(self) -> float:
        return self._limits.attempt_lease_s

    def publish(self, channel: str, event: Event) -> None:
        """Queue a frame (token chunks: losing one to a crash is repaired by redelivery)."""
        self._paced(channel, event, None)

    async def publish_confirmed(self, channel: str, event: Event) -> None:
        """Queue a frame and wait until Redis took it (terminal frames: the turn's offset
        must not be committed while its `turn.completed` exists only in this process)."""
        confirmed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._paced(channel, event, confirmed)
        await confirmed

    def _paced(self, channel: str, event: Event, confirmed: asyncio.Future[None] | None):
        """Through the pacer when there is one: a chunk may wait to be joined; any other
        frame of the turn sends the turn's waiting chunk first (order kept)."""
        pacer = self._pacer
        if pacer is None:
            self._enqueue(channel, event, confirmed)
            return
        key = (channel, event.turn_id)
        if isinstance(event, TokenChunk) and confirmed is None:
            now = asyncio.get_running_loop().time()
            ready, due = pacer.offer(key, event, now)
            for chunk in ready:
                self._enqueue(channel, chunk, None)
            if due != math.inf:
                self._set_timer(key, due)
            if len(pacer) > MAX_REMEMBERED_TURNS:  # a send older than a pace changes nothing
                pacer.forget_before(now - pacer.pace_s)
            return
        self._cancel_timer(key)
        held = pacer.before(key, ends=log_kind(event) == FINAL)
        if held is not None:
            self._enqueue(channel, held, None)
        self._enqueue(channel, event, confirmed)

    def _set_timer(self, key: Key, due: float) -> None:
        timer = self._timers.get(key)
        if timer is not None and timer.when() == due:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = asyncio.get_running_loop().call_at(due, self._release, key)

    def _cancel_timer(self, key: Key) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _release(self, key: Key) -> None:
        self._timers.pop(key, None)
        assert self._pacer is not None
        held = self._pacer.due(key, asyncio.get_running_loop().time())
        if held is None:
            return
        try:
            self._enqueue(key[0], held, None)
        except RelayOverflow:
            log.warning("relay full: a joined chunk of %s dropped", held.turn_id)

    def _enqueue(self, channel: str, event: Event, confirmed: asyncio.Future[None] | None):
        if len(self._pending) >= self._max_pending:
            raise RelayOverflow(f"{len(self._pending)} frames waiting for Redis")
        self._pending.append(
            _Frame(channel, event.turn_id, log_kind(event), encode(event), confirmed)
        )
        self._idle.clear()
        self._wakeup.set()

    async def flushed(self) -> None:
        """Wait until every frame queued so far has been handed to Redis (chunks waiting
        for their pace go at once)."""
        if self._pacer is not None:
            for key, held in self._pacer.drain():
                self._cancel_timer(key)
                self._enqueue(key[0], held, None)
        await self._idle.wait()

    async def run(self) -> None:
        backoff = 0.05
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    if self._sha is None:
                        self._sha = await self._redis.script_load(RELAY_SCRIPT)
                    now = time.monotonic()
                    refreshed: list[tuple[str, bool]] = []
                    async with self._redis.pipeline(transaction=False) as pipe:
                        for (channel, turn_id), frames in _by_turn(batch).items():
                            refresh = self._refresh_due(turn_id, now)
                            await self._relay_turn(pipe, channel, turn_id, frames, refresh)
                            if refresh:
                                refreshed.append((turn_id, _ends(frames)))
                        await pipe.execute()
                except NoScriptError:  # Redis lost its script cache (a restart): none ran
                    log.warning("relay script gone from Redis; loading it again")
                    self._sha = None
                    self._pending[:0] = batch
                    continue
                except (RedisConnectionError, RedisTimeoutError):  # Redis away: keep, retry
                    log.warning("relay publish failed; retrying in %.2fs", backoff, exc_info=True)
                    self._pending[:0] = batch
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    continue
                except Exception as err:  # a permanent error: retrying would loop forever
                    log.exception("relay dropped %d frames", len(batch))
                    for frame in batch:
                        if frame.confirmed is not None and not frame.confirmed.done():
                            frame.confirmed.set_exception(RelayFailed(repr(err)))
                    continue
                backoff = 0.05
                self._note_refreshed(refreshed, now)
                for frame in batch:
                    if frame.confirmed is not None and not frame.confirmed.done():
                        frame.confirmed.set_result(None)
            self._idle.set()

    def _refresh_due(self, turn_id: str, now: float) -> bool:
        last = self._refreshed.get(turn_id)
        return last is None or now - last >= self._limits.ttl_refresh_s

    def _note_refreshed(self, refreshed: list[tuple[str, bool]], now: float) -> None:
        """Only once Redis took the batch: a batch retried after an outage refreshes again
        (a log created without its TTL would never expire)."""
        for turn_id, ended in refreshed:
            if ended:
                self._refreshed.pop(turn_id, None)
            else:
                self._refreshed[turn_id] = now
        if len(self._refreshed) > MAX_REMEMBERED_TURNS:  # turns that ended elsewhere
            horizon = now - self._limits.ttl_refresh_s
            self._refreshed = {t: at for t, at in self._refreshed.items() if at > horizon}

    async def _relay_turn(
        self, pipe, channel: str, turn_id: str, frames: list[_Frame], refresh: bool
    ) -> None:
        names, limits = self._names, self._limits
        args: list[str | bytes | int] = [
            channel,
            limits.max_entries,
            limits.live_ttl_s,
            limits.done_ttl_s,
            1 if refresh or _ends(frames) else 0,
            int(self.attempt_lease_s * 1000),
        ]
        for frame in frames:
            args += (frame.kind, frame.payload)
        keys = [
            names.turn_log_key(turn_id),
            names.turn_epochs_key(turn_id),
            names.turn_watchers_key(turn_id),
            names.turn_live_key(turn_id),
        ]
        pipe.evalsha(self._sha, len(keys), *keys, *args)  # queued on the pipeline


@dataclass(slots=True)
class _Frame:
    channel: str
    turn_id: str
    kind: str  # schemas.turn_log's instruction to the script
    payload: bytes
    confirmed: asyncio.Future[None] | None


def _ends(frames: list[_Frame]) -> bool:
    return any(frame.kind == FINAL for frame in frames)


def _by_turn(batch: list[_Frame]) -> dict[tuple[str, str], list[_Frame]]:
    grouped: dict[tuple[str, str], list[_Frame]] = {}
    for frame in batch:
        grouped.setdefault((frame.channel, frame.turn_id), []).append(frame)
    return grouped

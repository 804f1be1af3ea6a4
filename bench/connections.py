"""How many WebSocket connections one edge process holds, how fast it delivers tokens to them,
and how long a dropped client takes to pick its answer up again.

Why: the edge is the one part that holds a socket per user; its memory per connection, its
CPU per delivered token and its stalls decide how many edges a deployment needs and what a
user sees when the edge is busy.

Everything is real except the model: one edge process (the real `EdgeServer`, `python -m
ws_edge` through `runpy` so its full garbage collections can be timed) on the local Redis and
Kafka in its own namespace; the load's clients in one or two other processes (one process
cannot both be the edge and drive 10k sockets fairly); a "token pump" process plays the
inference workers: it consumes `turns.submitted` from Kafka (as a worker does), answers each
turn with `turn.started`, `TokenChunk`s and finally `turn.completed`, through the workers' real
`RelayPublisher` (the Lua script that logs and publishes each turn's frames). It makes
`--steps-per-s` decode steps a second, each for one group of streams, so a step is as big at
any stream count (the same burstiness at 1k and 10k).

Each token's text is ` <index>@<publish wall-clock ms>`: a `response.delta` the edge joined for
a slow reader (texts concatenated) carries several stamps, each token counted, its delay =
receive time - its stamp; the indices prove no token was lost or repeated.

For each `--connections` N (default 1000 and 10000):

1. direct baseline: the same pump and streams, published to one channel read by one process
   with the edge's own relay reader (`ws_edge.relay.RelaySubscriber`), no sessions, no
   sockets: the Redis hop's delay under the same load, so the edge's added delay is isolated;
2. connections: N clients connect (token in the URL) and wait for `session.ready`: connect
   time, the edge's RSS before/after (/proc/<pid>/status VmRSS) per connection;
3. turns: every client sends a real `turn.create` (admission, conversation claim, Kafka),
   at most `--create-concurrency` unanswered at once: turns admitted per second;
4. streaming: the pump streams every accepted turn (they start together, once all are in);
   over a `--seconds` window: delivered tokens/s and delta frames/s at the clients (their
   ratio: how much the edge coalesced), p50/p99 delay, the CPU of the edge, Redis, Kafka,
   the pump, the clients and the rest of the machine (/proc/<pid>/stat, /proc/stat), the
   edge's full GC pauses, and a new client's handshake time measured from the idle parent;
5. resume: `--resume` streams mid-answer drop their connection (TCP abort, `--resume-rate` a
   second), stay offline (at least two token intervals, so the log holds what they missed),
   reconnect with `EdgeClient` and `response.resume` from their last position: time from
   the reconnect's start to WebSocket open, `session.ready`, `response.resumed` and the
   first resumed delta;
6. finish: the pump ends every turn; each client checks its answer: indices consecutive (no
   gap, no duplicate), the characters received equal `response.done`'s text (the resumed
   ones compare the whole text).

Per-stream rate: `--tokens-per-s` (20, the seed design's speed), lowered so all streams
together offer at most `--max-offered` tokens/s (default 5000: 5/s each at 1k, 0.5/s at 10k).
On this 2-core machine, shared by the edge, the clients, the pump, Redis and Kafka, 20/s x
1000 streams (20k tokens/s) saturates the machine even without the edge (the direct
baseline's delay grows without bound), so the default compares 1k and 10k connections at
the same total load below saturation; `--max-offered 0` measures the uncapped rate
(saturation: delays are then queueing, and grow with the run). The 1000-connection run is
the baseline of the larger ones (ratios); the direct run is the baseline of each edge run.

The load processes freeze their heaps after setup (`gc.freeze`): they are not measured.
`--edge-gc off` runs the edge without the cyclic collector, to tell its pauses apart (a
diagnosis, not a setting). `--profile` records the largest run's edge with py-spy during
its window (a GC pause shows as self time of whatever allocated when it began).

    python -m bench.connections                               # 1k and 10k (2-4 min, 2 cores)
    python -m bench.connections --connections 200 --seconds 5 --resume 50
    python -m bench.connections --max-offered 0 --profile     # 20 tokens/s each: saturation

Prints a table; writes bench/results/connections.json, bench/results/connections.png and
bench/figures/connections.png (with --profile, bench/results/connections-edge-profile-N.txt).
File descriptors: every process raises RLIMIT_NOFILE to its hard limit (20000 here); the
edge needs one per connection, the clients too, split over processes of at most
`--per-client-proc` connections. The edge's log is in $TURNSTREAM_HOME/logs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import math
import multiprocessing
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import msgspec

from bench.plotting import RESULTS, save_figure
from bench.stats import summary

log = logging.getLogger("bench.connections")

TENANT = "bench"
DIRECT_EDGE = "bench-direct"  # the direct baseline's channel is this "edge"'s
STAMP = re.compile(r"(\d+)@(\d+\.\d)")


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


# ---- pure parts: stamps, continuity, the recorder, the rows ----------------------------------
def token_text(index: int, stamp_ms: float) -> str:
    """A pump token: its index in the answer and the wall clock (ms) when it was published."""
    return f" {index}@{stamp_ms:.1f}"


def parse_stamps(text: str) -> list[tuple[int, float]]:
    """(index, stamp ms) of every token in a delta's text (joined deltas hold several)."""
    return [(int(m[1]), float(m[2])) for m in STAMP.finditer(text)]


@dataclass(slots=True)
class Continuity:
    """One answer's token indices as they arrive: they must count 0, 1, 2, ... ."""

    next_index: int = 0
    gaps: int = 0  # tokens skipped
    duplicates: int = 0  # tokens seen again

    def feed(self, index: int) -> None:
        if index == self.next_index:
            self.next_index += 1
        elif index > self.next_index:
            self.gaps += index - self.next_index
            self.next_index = index + 1
        else:
            self.duplicates += 1

    @property
    def clean(self) -> bool:
        return self.gaps == 0 and self.duplicates == 0


@dataclass(frozen=True, slots=True)
class Window:
    """The measured stretch, in wall-clock ms (receive times)."""

    start_ms: float
    end_ms: float

    def __contains__(self, at_ms: float) -> bool:
        return self.start_ms <= at_ms < self.end_ms

    @property
    def seconds(self) -> float:
        return (self.end_ms - self.start_ms) / 1000


@dataclass
class Recorder:
    """Tokens and frames one process received; delays of those received in the window."""

    window: Window | None = None
    tokens: int = 0  # in the window
    frames: int = 0  # in the window
    total_tokens: int = 0
    total_frames: int = 0
    delays: array = field(default_factory=lambda: array("d"))  # ms, tokens in the window

    def delta(self, now_ms: float, text: str, check: Continuity) -> int:
        """A delta frame received at `now_ms`; returns how many tokens it carried."""
        stamps = parse_stamps(text)
        self.total_frames += 1
        self.total_tokens += len(stamps)
        for index, _ in stamps:
            check.feed(index)
        window = self.window
        if window is not None and now_ms in window:
            self.frames += 1
            self.tokens += len(stamps)
            self.delays.extend(now_ms - stamp for _, stamp in stamps)
        return len(stamps)

    def report(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "frames": self.frames,
            "total_tokens": self.total_tokens,
            "total_frames": self.total_frames,
            "delays": self.delays.tobytes(),
        }


def merge_reports(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several processes' `Recorder.report()`s as one (delays as a list of ms)."""
    delays: list[float] = []
    for r in reports:
        part = array("d")
        part.frombytes(r["delays"])
        delays.extend(part)
    keys = ("tokens", "frames", "total_tokens", "total_frames")
    return {**{k: sum(r[k] for r in reports) for k in keys}, "delays": delays}


def ratio(value: float, base: float) -> float:
    """value / base; NaN when either is unknown or the base is 0."""
    if base == 0 or math.isnan(base) or math.isnan(value):
        return math.nan
    return value / base


def delivery_stats(
    received: dict[str, Any], seconds: float, direct_delays: Sequence[float]
) -> dict[str, Any]:
    """Throughput, coalescing and delay of one edge run, its added delay over the direct
    baseline's (same percentile)."""
    delay = summary(received["delays"])
    direct = summary(direct_delays)
    return {
        "tokens_per_s": received["tokens"] / seconds if seconds else math.nan,
        "frames_per_s": received["frames"] / seconds if seconds else math.nan,
        "tokens_per_frame": ratio(received["tokens"], received["frames"]),
        "delay_ms": delay,
        "direct_delay_ms": direct,
        "added_p50_ms": delay["p50"] - direct["p50"],
        "added_p99_ms": delay["p99"] - direct["p99"],
    }


def versus(row: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
    """A run against the baseline run (the smallest N): > 1 means more (delay, cost) or more
    throughput."""
    return {
        "connections": ratio(row["connections"], base["connections"]),
        "tokens_per_s": ratio(row["tokens_per_s"], base["tokens_per_s"]),
        "delay_p99": ratio(row["delay_ms"]["p99"], base["delay_ms"]["p99"]),
        "added_p99": ratio(row["added_p99_ms"], base["added_p99_ms"]),
        "rss_per_connection": ratio(row["rss_kb_per_conn"], base["rss_kb_per_conn"]),
        "edge_cpu_us_per_token": ratio(row["edge_cpu_us_per_token"], base["edge_cpu_us_per_token"]),
        "resume_p99": ratio(row["resume_ms"]["p99"], base["resume_ms"]["p99"]),
    }


def stream_rate(streams: int, per_stream: float, max_offered: float) -> float:
    """Tokens/s each stream gets: `per_stream`, lowered so that all of them together offer
    at most `max_offered` (0: no cap)."""
    if max_offered <= 0 or streams <= 0:
        return per_stream
    return min(per_stream, max_offered / streams)


def phases_for(rate: float, steps_per_s: float) -> int:
    """How many groups the pump's streams take turns in, so that it makes `steps_per_s`
    decode steps a second whatever the per-stream rate (each step as big at 1k streams and
    5 tokens/s as at 10k and 0.5/s: the same burstiness)."""
    return max(1, round(steps_per_s / rate))


def split(total: int, parts: int) -> list[int]:
    """`total` as `parts` near-equal shares (the first ones get the remainder)."""
    share, extra = divmod(total, parts)
    return [share + (i < extra) for i in range(parts)]


def quantiles(values: Sequence[float], points: int = 200) -> list[float]:
    """The sample's quantiles at `points` evenly spaced ranks (a CDF small enough for JSON)."""
    if not values:
        return []
    ordered = sorted(values)
    last = len(ordered) - 1
    return [ordered[round(last * i / (points - 1))] for i in range(points)]


# ---- the operating system -------------------------------------------------------------------
def raise_nofile() -> int:
    """Raise this process's open-file limit to its hard limit; the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else 1 << 20
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (and its threads) so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values) - idle) / CLOCK_TICKS, sum(values) / CLOCK_TICKS


def listen_overflows() -> int:
    """Connections the kernel dropped because a listening socket's accept queue was full
    (TcpExt ListenOverflows, machine-wide): the client retries its SYN after 1, 3, 7 s."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(row.get("ListenOverflows", 0))
    return 0


def find_pid(needle: str) -> int | None:
    """The first process whose command line contains `needle` (Kafka's JVM)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    return int(entry.name)
    return None


class CpuMeter:
    """CPU% (100 = one core) of named processes, and of the rest of the machine, between
    `start()` and `stop()`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid}
        self._start: tuple[float, dict[str, float], tuple[float, float]] | None = None

    def start(self) -> None:
        self._start = (time.monotonic(), self._sample(), machine_busy())

    def _sample(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        assert self._start is not None
        started, before, (busy0, total0) = self._start
        wall = time.monotonic() - started
        after = self._sample()
        busy1, total1 = machine_busy()
        usage = {name: 100 * (after[name] - before[name]) / wall for name in after}
        cores = os.cpu_count() or 1
        machine = 100 * cores * (busy1 - busy0) / max(total1 - total0, 1e-9)
        usage["machine"] = machine
        usage["others"] = machine - sum(v for k, v in usage.items() if k != "machine")
        return usage


# ---- the child processes ---------------------------------------------------------------------
def _child_main(role: str, conn: Connection, config: dict[str, Any]) -> None:
    """A child process: raise the fd limit, then carry out the parent's commands."""
    import uvloop

    raise_nofile()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    logging.basicConfig(level=logging.WARNING, format=f"{role}: %(levelname)s %(message)s")
    roles = {"clients": ClientsRole, "pump": PumpRole, "subscriber": SubscriberRole}
    uvloop.run(_serve(roles[role](config, conn), conn))


def settle_heap() -> None:
    """Move what this load process holds for the whole run out of the collector's way
    (`gc.freeze`): a full collection over thousands of connections' objects stalls the
    process for up to a second on this machine, and the load generators are not what is
    measured (the edge is left as it is)."""
    gc.collect()
    gc.freeze()


async def _serve(role: Any, conn: Connection) -> None:
    while True:
        command, args = await asyncio.to_thread(conn.recv)
        try:
            result = await getattr(role, command)(*args)
        except Exception:
            conn.send(("error", traceback.format_exc()))
            continue
        conn.send(("result", result))
        if command == "exit":
            return


class _DecodedFrame(msgspec.Struct):
    """The fields of a server frame the load clients look at (the rest is skipped)."""

    type: str
    turn_id: str | None = None
    text: str | None = None
    epoch: int | None = None
    offset: int | None = None
    client_turn_id: str | None = None
    code: str | None = None
    retryable: bool = False
    retry_after_ms: int | None = None


_frame_decoder = msgspec.json.Decoder(_DecodedFrame)


@dataclass(eq=False)
class _Stream:
    """One client connection and its one turn."""

    user: str
    conversation_id: str
    client_turn_id: str
    token: str
    tracked: bool  # keeps its text (a resume candidate: its whole text is compared)
    ws: Any = None
    reader: asyncio.Task[None] | None = None
    ready: asyncio.Future[None] | None = None
    accepted: asyncio.Future[str] | None = None
    create_sent: float = 0.0  # the first try
    accept_ms: float | None = None  # first try → turn.accepted (retries included)
    create_attempts: int = 0
    turn_id: str = ""
    check: Continuity = field(default_factory=Continuity)
    chars: int = 0
    parts: list[str] = field(default_factory=list)
    position: tuple[int, int] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    done_chars: int = -1
    text_matches: bool | None = None  # tracked: the received text is `response.done`'s
    resumed: bool = False
    resume_status: str = ""
    resume_ms: float | None = None  # reconnect start → first resumed delta
    # reconnect start → WebSocket open, → session.ready, → response.resumed
    resume_steps: tuple[float, float, float] | None = None
    first_resumed: asyncio.Future[None] | None = None
    error: str = ""


class ClientsRole:
    """One process's share of the load's WebSocket clients."""

    def __init__(self, config: dict[str, Any], conn: Connection) -> None:
        from ws_edge.auth import mint_token

        self.config = config
        self.conn = conn
        self.url = config["url"]
        self.recorder = Recorder()
        self.streams: list[_Stream] = []
        self.exits = contextlib.AsyncExitStack()
        self.background: set[asyncio.Task[None]] = set()  # the resumed streams' readers
        proc, run = config["proc"], config["run"]
        for i in range(config["count"]):
            user = f"u{proc}-{i}"
            self.streams.append(
                _Stream(
                    user=user,
                    conversation_id=f"c-{run}-{proc}-{i}",
                    client_turn_id=f"t-{proc}-{i}",
                    token=mint_token(config["secret"], user, TENANT),
                    tracked=i < config["tracked"],
                )
            )

    def _progress(self, value: int) -> None:
        self.conn.send(("progress", value))

    async def connect(self) -> dict[str, Any]:
        from websockets.asyncio.client import connect

        gate = asyncio.Semaphore(self.config["connect_concurrency"])
        times: list[float] = []
        failures: list[str] = []
        loop = asyncio.get_running_loop()

        async def one(stream: _Stream) -> None:
            async with gate:
                started = time.perf_counter()
                try:
                    stream.ready = loop.create_future()
                    stream.ws = await connect(
                        f"{self.url}?token={stream.token}",
                        compression=None,
                        max_size=None,
                        ping_interval=None,  # the edge pings; the clients only answer
                        open_timeout=60,
                        close_timeout=1,
                    )
                    stream.reader = asyncio.create_task(self._read(stream))
                    await asyncio.wait_for(stream.ready, 60)
                    times.append((time.perf_counter() - started) * 1000)
                except Exception as err:
                    failures.append(repr(err))
                    stream.error = f"connect: {err!r}"
                    if stream.ws is not None:
                        stream.ws.transport.abort()
                    stream.ws = None
                done = len(times) + len(failures)
                if done % 250 == 0:
                    self._progress(done)

        started = time.perf_counter()
        await asyncio.gather(*(one(s) for s in self.streams))
        self._progress(len(self.streams))
        settle_heap()
        return {
            "connect_ms": times,
            "failures": len(failures),
            "failure_kinds": dict(Counter(f.split("(")[0] for f in failures)),
            "failure_examples": failures[:3],
            "wall_s": time.perf_counter() - started,
        }

    async def create(self, rate: float, concurrency: int) -> dict[str, Any]:
        """One `turn.create` per connection: at most `concurrency` unanswered at once (the
        next goes when one is answered) and `rate` a second; retries included."""
        from ws_edge.messages import CreateTurn, encode_client

        loop = asyncio.get_running_loop()
        live = [s for s in self.streams if s.ws is not None]
        gate = asyncio.Semaphore(concurrency)
        started = time.perf_counter()
        answered = 0

        async def one(i: int, stream: _Stream) -> None:
            nonlocal answered
            async with gate:
                due = started + i / rate
                if due > time.perf_counter():
                    await asyncio.sleep(due - time.perf_counter())
                stream.accepted = loop.create_future()
                await self._send_create(stream, CreateTurn, encode_client)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stream.accepted), 90)
                answered += 1
                if answered % 250 == 0:
                    self._progress(sum(1 for s in live if s.turn_id))

        await asyncio.gather(*(one(i, s) for i, s in enumerate(live)))
        wall_s = time.perf_counter() - started
        settle_heap()
        accepted = [s for s in live if s.turn_id]
        errors = Counter(s.error.split(":")[0] for s in live if not s.turn_id)
        self._progress(len(accepted))
        return {
            "accepted": len(accepted),
            "refused": len(live) - len(accepted),
            "errors": dict(errors),
            "retries": sum(max(s.create_attempts - 1, 0) for s in live),
            "accept_ms": [s.accept_ms for s in accepted if s.accept_ms is not None],
            "wall_s": wall_s,
        }

    async def _send_create(self, stream: _Stream, create_turn: Any, encode: Any) -> None:
        stream.create_attempts += 1
        if stream.create_attempts == 1:
            stream.create_sent = time.perf_counter()
        message = create_turn(
            conversation_id=stream.conversation_id,
            text="stream me an answer",
            client_turn_id=stream.client_turn_id,  # a retry is the same turn
        )
        try:
            await stream.ws.send(encode(message))
        except Exception as err:
            stream.error = f"send: {err!r}"
            if stream.accepted is not None and not stream.accepted.done():
                stream.accepted.set_result("")

    def _refused(self, stream: _Stream, frame: _DecodedFrame) -> None:
        """An error answered the turn.create: retry what says it may be retried."""
        from ws_edge.messages import CreateTurn, encode_client

        if frame.retryable and stream.create_attempts < 6:
            wait_s = (frame.retry_after_ms or 500) / 1000
            resend = self._send_create(stream, CreateTurn, encode_client)
            asyncio.get_running_loop().call_later(wait_s, asyncio.ensure_future, resend)
            return
        stream.error = f"{frame.code}: refused"
        if stream.accepted is not None and not stream.accepted.done():
            stream.accepted.set_result("")

    async def _read(self, stream: _Stream) -> None:
        from websockets.exceptions import ConnectionClosed

        recorder = self.recorder
        try:
            async for frame in stream.ws:
                now = time.time() * 1000.0
                event = _frame_decoder.decode(frame)
                kind = event.type
                if event.epoch is not None and event.offset is not None:
                    stream.position = (event.epoch, event.offset)
                if kind == "response.delta":
                    text = event.text or ""
                    recorder.delta(now, text, stream.check)
                    stream.chars += len(text)
                    if stream.tracked:
                        stream.parts.append(text)
                elif kind == "response.done":
                    self._finished(stream, event.text or "")
                elif kind == "session.ready":
                    if stream.ready is not None and not stream.ready.done():
                        stream.ready.set_result(None)
                elif kind == "turn.accepted":
                    stream.turn_id = event.turn_id or ""
                    stream.accept_ms = (time.perf_counter() - stream.create_sent) * 1000
                    if stream.accepted is not None and not stream.accepted.done():
                        stream.accepted.set_result(stream.turn_id)
                elif kind == "error":
                    if event.client_turn_id == stream.client_turn_id and not stream.turn_id:
                        self._refused(stream, event)
                    elif not stream.error:
                        stream.error = f"{event.code}: error frame"
        except ConnectionClosed:
            pass

    def _finished(self, stream: _Stream, text: str) -> None:
        stream.done_chars = len(text)
        if stream.tracked:
            stream.text_matches = "".join(stream.parts) == text
            stream.parts = []
        stream.done.set()

    async def window(self, start_ms: float, end_ms: float) -> dict[str, Any]:
        self.recorder.window = Window(start_ms, end_ms)
        return {}

    async def report(self) -> dict[str, Any]:
        return self.recorder.report()

    async def resume(self, count: int, gap_s: float, rate: float) -> dict[str, Any]:
        """Drop `count` tracked streams' connections, reconnect, resume; until every one got
        its first resumed delta (the rest of its answer keeps coming in the background)."""
        chosen = [s for s in self.streams if s.tracked and s.turn_id and not s.done.is_set()]
        chosen = chosen[:count]
        loop = asyncio.get_running_loop()
        for stream in chosen:  # `rate` drops a second: not one synchronized herd
            stream.first_resumed = loop.create_future()
            self.background.add(asyncio.create_task(self._resume_one(stream, gap_s)))
            await asyncio.sleep(1 / rate)
        futures = [s.first_resumed for s in chosen if s.first_resumed is not None]
        if futures:
            await asyncio.wait(futures, timeout=60)
        return {
            "resume_ms": [s.resume_ms for s in chosen if s.resume_ms is not None],
            "steps_ms": [s.resume_steps for s in chosen if s.resume_steps is not None],
            "tried": len(chosen),
            "statuses": dict(Counter(s.resume_status or "none" for s in chosen)),
            "errors": [s.error for s in chosen if s.error][:5],
        }

    async def _resume_one(self, stream: _Stream, gap_s: float) -> None:
        from schemas.turn_log import LogPosition
        from ws_edge.client import EdgeClient
        from ws_edge.messages import Authenticate, ResponseDelta, ResponseDone, SessionReady

        assert stream.first_resumed is not None
        try:
            stream.ws.transport.abort()  # the network drops: no close handshake
            if stream.reader is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await stream.reader
            stream.resumed = True
            await asyncio.sleep(gap_s)
            started = time.perf_counter()
            # EdgeClient.connect(url, token), in its two steps (each timed)
            client = await self.exits.enter_async_context(EdgeClient.connect(self.url))
            opened = time.perf_counter()
            await client.send(Authenticate(token=stream.token))
            ready_event = await client.next_event()
            if not isinstance(ready_event, SessionReady):
                raise RuntimeError(f"no session.ready: {ready_event!r}")
            ready = time.perf_counter()
            after = LogPosition(*stream.position) if stream.position is not None else None
            resumed = await client.resume(stream.turn_id, after=after)
            stream.resume_steps = (
                (opened - started) * 1000,
                (ready - started) * 1000,
                (time.perf_counter() - started) * 1000,
            )
            stream.resume_status = resumed.status
            async for event in client.events(stream.turn_id, wait_s=120):
                if isinstance(event, ResponseDelta):
                    if stream.resume_ms is None:
                        stream.resume_ms = (time.perf_counter() - started) * 1000
                        stream.first_resumed.set_result(None)
                    self.recorder.delta(time.time() * 1000.0, event.text, stream.check)
                    stream.chars += len(event.text)
                    stream.parts.append(event.text)
                elif isinstance(event, ResponseDone):
                    self._finished(stream, event.text)
        except Exception as err:
            stream.error = f"resume: {err!r}"
        finally:
            if not stream.first_resumed.done():
                stream.first_resumed.set_result(None)

    async def collect(self, timeout_s: float) -> dict[str, Any]:
        """Wait for every turn's `response.done`; check what each received."""
        streams = [s for s in self.streams if s.turn_id]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while not all(s.done.is_set() for s in streams):
                    self._progress(sum(s.done.is_set() for s in streams))
                    waiting = [s for s in streams if not s.done.is_set()][:500]
                    tasks = [asyncio.ensure_future(s.done.wait()) for s in waiting]
                    await asyncio.wait(tasks, timeout=1)
                    for task in tasks:
                        task.cancel()
        done = [s for s in streams if s.done.is_set()]
        whole = [s for s in done if s.check.clean and s.chars == s.done_chars]
        resumed = [s for s in streams if s.resumed]
        return {
            "turns": len(streams),
            "done": len(done),
            "verified": len(whole),
            "gaps": sum(s.check.gaps for s in streams),
            "duplicates": sum(s.check.duplicates for s in streams),
            "length_mismatches": sum(1 for s in done if s.chars != s.done_chars),
            "resumed": len(resumed),
            "resumed_verified": sum(
                1 for s in resumed if s.text_matches and s.check.clean and s.done.is_set()
            ),
            "resumed_examples": [
                {"gaps": s.check.gaps, "duplicates": s.check.duplicates, "error": s.error}
                for s in resumed
                if not (s.text_matches and s.check.clean)
            ][:5],
        }

    async def exit(self) -> dict[str, Any]:
        for task in self.background:
            task.cancel()
        for stream in self.streams:
            if stream.ws is not None:
                stream.ws.transport.abort()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.exits.aclose(), 10)
        return {}


@dataclass(eq=False)
class _PumpStream:
    turn_id: str
    channel: str
    conversation_id: str
    tenant_id: str
    user_id: str
    attempt: str
    started_ms: float
    index: int = 0
    stamps: array = field(default_factory=lambda: array("d"))
    active: bool = True


class PumpRole:
    """The inference workers' part: every turn gets `turn.started`, a token every
    1/rate s and, on `finish`, `turn.completed`, through the workers' `RelayPublisher`."""

    def __init__(self, config: dict[str, Any], conn: Connection) -> None:
        from runtime.redis import redis_client
        from schemas.channels import RedisNames
        from workers.runtime.relay import RelayPublisher

        self.config = config
        self.names = RedisNames.for_namespace(config["namespace"])
        self.redis = redis_client(config["redis_url"], max_connections=8)
        self.publisher = RelayPublisher(self.redis, self.names)
        self.phases: list[list[_PumpStream]] = [[] for _ in range(config["phases"])]
        self.streams: list[_PumpStream] = []
        self.ticks: list[tuple[float, int]] = []  # (wall ms, tokens published)
        self.late = 0  # decode steps that came more than a token interval late
        self.refused = 0  # tokens the publisher refused (Redis too far behind)
        self.tasks: list[asyncio.Task[None]] = []
        self.consumer: Any = None
        self.seen: set[str] = set()  # a turn Kafka delivers twice is answered once
        self.duplicates = 0
        self.holding = bool(config.get("hold"))  # turns start, tokens wait for `go`

    async def start(self, synthetic: int, channel: str) -> dict[str, Any]:
        """Stream `synthetic` made-up turns to `channel`, and the turns of `turns.submitted`
        (the config's topic, if any) to their edges."""
        self.tasks.append(asyncio.create_task(self.publisher.run()))
        for i in range(synthetic):
            self._add(f"direct-{i:05d}", channel, "c", TENANT, "u")
        topic = self.config.get("topic")
        if topic:
            from aiokafka import AIOKafkaConsumer

            self.consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=self.config["kafka_bootstrap"],
                group_id=None,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=20,
            )
            await self.consumer.start()
            self.tasks.append(asyncio.create_task(self._consume()))
        self.tasks.append(asyncio.create_task(self._tick()))
        settle_heap()
        return {}

    async def _consume(self) -> None:
        from schemas.codec import decode
        from schemas.events import TurnSubmitted

        async for record in self.consumer:
            event = decode(record.value)
            if isinstance(event, TurnSubmitted):
                channel = self.names.edge_channel(event.edge_id)
                self._add(
                    event.turn_id, channel, event.conversation_id, event.tenant_id, event.user_id
                )

    def _add(self, turn_id: str, channel: str, conversation: str, tenant: str, user: str) -> None:
        from schemas.events import TurnStarted

        if turn_id in self.seen:
            self.duplicates += 1
            return
        self.seen.add(turn_id)
        stream = _PumpStream(
            turn_id, channel, conversation, tenant, user, uuid.uuid4().hex[:8], time.time() * 1000
        )
        event = TurnStarted(
            turn_id=turn_id, worker_id="bench-pump", model="bench", attempt=stream.attempt
        )
        self.publisher.publish(channel, event)
        self.phases[len(self.streams) % len(self.phases)].append(stream)
        self.streams.append(stream)

    async def _tick(self) -> None:
        """Each decode step emits one token for a phase's streams; the phases take turns,
        `phases` steps per token interval."""
        from schemas.events import TokenChunk
        from workers.runtime.relay import RelayOverflow

        interval = 1 / self.config["tokens_per_s"]
        step = interval / len(self.phases)
        next_at = time.perf_counter()
        phase = 0
        publish = self.publisher.publish
        while True:
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.holding:
                next_at = time.perf_counter() + step
                continue
            now = time.time() * 1000.0
            count = 0
            for s in self.phases[phase]:
                if not s.active:
                    continue
                chunk = TokenChunk(
                    turn_id=s.turn_id,
                    seq=s.index,
                    text=token_text(s.index, now),
                    emitted_at_ms=now,
                    attempt=s.attempt,
                )
                try:
                    publish(s.channel, chunk)
                except RelayOverflow:
                    self.refused += 1
                    continue
                s.stamps.append(now)
                s.index += 1
                count += 1
            self.ticks.append((now, count))
            phase = (phase + 1) % len(self.phases)
            next_at += step
            if time.perf_counter() - next_at > interval:  # a whole interval behind: skip it
                self.late += 1
                next_at = time.perf_counter()

    async def count(self) -> dict[str, Any]:
        return {"streams": len(self.streams), "duplicates": self.duplicates}

    async def go(self) -> dict[str, Any]:
        """Start the tokens of the turns held so far (and of every later one)."""
        settle_heap()
        self.holding = False
        return {}

    async def stats(self, start_ms: float, end_ms: float) -> dict[str, Any]:
        published = sum(c for at, c in self.ticks if start_ms <= at < end_ms)
        return {
            "tokens": published,
            "late_steps": self.late,
            "refused": self.refused,
            "duplicate_turns": self.duplicates,
            "pending": len(self.publisher._pending),
        }

    async def finish(self, turns_per_s: float) -> dict[str, Any]:
        """End every turn (`turn.completed` with the whole text), `turns_per_s` a second (a
        burst of whole answers at once is not what workers do)."""
        from schemas.events import FinishReason, Timings, TurnCompleted, Usage

        started = time.perf_counter()
        for i, s in enumerate(self.streams):
            s.active = False
            text = "".join(token_text(j, stamp) for j, stamp in enumerate(s.stamps))
            now = time.time() * 1000
            done = TurnCompleted(
                turn_id=s.turn_id,
                conversation_id=s.conversation_id,
                tenant_id=s.tenant_id,
                user_id=s.user_id,
                finish_reason=FinishReason.STOP,
                text=text,
                usage=Usage(prompt_tokens=4, completion_tokens=s.index),
                timings=Timings(queue_ms=0.0, ttft_ms=0.0, e2e_ms=now - s.started_ms),
                model="bench",
                worker_id="bench-pump",
                completed_at_ms=now,
            )
            self.publisher.publish(s.channel, done)
            due = started + (i + 1) / turns_per_s
            if due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
        await asyncio.wait_for(self.publisher.flushed(), 60)
        return {"completed": len(self.streams)}

    async def exit(self) -> dict[str, Any]:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                await self.consumer.stop()
        await self.redis.aclose()
        return {}


class SubscriberRole:
    """The direct baseline's reader: the edge's relay subscriber (one Redis subscription,
    routes by turn id, the same decoding), no sessions, no sockets."""

    def __init__(self, config: dict[str, Any], conn: Connection) -> None:
        from runtime.redis import redis_client
        from schemas.channels import RedisNames

        self.config = config
        self.names = RedisNames.for_namespace(config["namespace"])
        self.redis = redis_client(config["redis_url"], max_connections=8)
        self.recorder = Recorder()
        self.checks: dict[str, Continuity] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self, channel: str, turns: int) -> dict[str, Any]:
        from ws_edge.relay import RelaySubscriber

        relay = RelaySubscriber(self.redis, channel, self.names.done_key)
        for i in range(turns):
            turn_id = f"direct-{i:05d}"
            self.checks[turn_id] = Continuity()
            relay.route(turn_id, self._deliver)
        self.task = asyncio.create_task(relay.run())
        await asyncio.wait_for(relay.subscribed.wait(), 10)
        settle_heap()
        return {}

    def _deliver(self, event: Any, position: Any) -> None:
        from schemas.events import TokenChunk

        if isinstance(event, TokenChunk):
            self.recorder.delta(time.time() * 1000.0, event.text, self.checks[event.turn_id])

    async def window(self, start_ms: float, end_ms: float) -> dict[str, Any]:
        self.recorder.window = Window(start_ms, end_ms)
        return {}

    async def report(self) -> dict[str, Any]:
        report = self.recorder.report()
        report["gaps"] = sum(c.gaps for c in self.checks.values())
        report["duplicates"] = sum(c.duplicates for c in self.checks.values())
        return report

    async def exit(self) -> dict[str, Any]:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.redis.aclose()
        return {}


# ---- the parent: driving the children --------------------------------------------------------
class BenchError(RuntimeError):
    pass


class Peer:
    """A child process and the pipe to it."""

    def __init__(self, name: str, role: str, config: dict[str, Any]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, child_end = ctx.Pipe()
        self.process = ctx.Process(
            target=_child_main, args=(role, child_end, config), name=name, daemon=True
        )
        self.process.start()
        child_end.close()

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def call(self, command: str, *args: Any, timeout_s: float = 120) -> Any:
        return call_all([self], command, [args], timeout_s=timeout_s)[0]

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(Exception):
                self.call("exit", timeout_s=15)
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


def call_all(
    peers: Sequence[Peer],
    command: str,
    args: Sequence[tuple[Any, ...]],
    *,
    timeout_s: float = 120,
    label: str = "",
    total: int = 0,
) -> list[Any]:
    """Send each peer its command, then wait for every answer, showing their progress."""
    for peer, peer_args in zip(peers, args, strict=True):
        peer.conn.send((command, tuple(peer_args)))
    results: dict[int, Any] = {}
    counts = [0] * len(peers)
    deadline = time.monotonic() + timeout_s
    last_shown = time.monotonic()
    started = time.monotonic()
    by_conn = {peer.conn: i for i, peer in enumerate(peers)}
    while len(results) < len(peers):
        if time.monotonic() > deadline:
            raise BenchError(f"{command}: no answer within {timeout_s:.0f} s")
        for conn in wait([p.conn for i, p in enumerate(peers) if i not in results], timeout=0.5):
            i = by_conn[conn]  # type: ignore[index]
            try:
                kind, payload = peers[i].conn.recv()
            except EOFError:
                raise BenchError(f"{peers[i].name} exited during {command}") from None
            if kind == "progress":
                counts[i] = payload
            elif kind == "error":
                raise BenchError(f"{peers[i].name} failed in {command}:\n{payload}")
            else:
                results[i] = payload
        if label and time.monotonic() - last_shown >= 2:
            last_shown = time.monotonic()
            done = sum(counts)
            rate = done / (time.monotonic() - started)
            progress(f"{label}: {done}/{total} ({rate:.0f}/s)")
    return [results[i] for i in range(len(peers))]


def sleep_with_progress(seconds: float, label: str) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 5))
        if end - time.monotonic() > 0.5:
            progress(f"{label}: {end - time.monotonic():.0f} s left")


class HandshakeProbe:
    """From this (idle) process, a new WebSocket handshake with the edge every `every_s`:
    the time from connect() to the `101 Switching Protocols`, seen by a client that is not
    itself busy (tells the edge's slowness from the load clients')."""

    def __init__(self, port: int, token: str, every_s: float = 0.25) -> None:
        import threading

        self.port = port
        self.token = token
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []  # (wall ms at start, ms; inf: failed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import base64
        import socket

        while not self._stop.wait(self.every_s):
            key = base64.b64encode(os.urandom(16)).decode()
            request = (
                f"GET /?token={self.token} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            at_ms, started = time.time() * 1000, time.perf_counter()
            took = math.inf
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=15) as sock:
                    sock.sendall(request.encode())
                    answer = b""
                    while b"\r\n\r\n" not in answer:
                        chunk = sock.recv(4096)
                        if not chunk:
                            break
                        answer += chunk
                    if answer.startswith(b"HTTP/1.1 101"):
                        took = (time.perf_counter() - started) * 1000
            except OSError:
                pass
            self.samples.append((at_ms, took))

    def between(self, window: Window) -> dict[str, float]:
        took = [ms for at, ms in self.samples if at in window]
        done = [ms for ms in took if ms != math.inf]
        return summary(done) | {"failed": len(took) - len(done)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)


def redis_pid(url: str) -> int | None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def clean_namespace(settings: Any) -> None:
    """Drop the run's Kafka topics and Redis keys (each run has its own namespace)."""
    from bench.namespace import drop_namespace

    asyncio.run(drop_namespace(settings))


def edge_log_facts(path: Path) -> dict[str, int]:
    """Trouble the edge logged: lost relay subscriptions, slow clients closed, tracebacks."""
    text = path.read_text(errors="replace") if path.exists() else ""
    return {
        "relay_resubscribes": text.count("relay subscription lost"),
        "slow_clients_closed": text.count("closing slow client"),
        "tracebacks": text.count("Traceback"),
        "warnings": text.count(" WARNING "),
    }


# The edge's process: `python -m ws_edge` as it is, started through `runpy` so that the
# benchmark can time the edge's full garbage collections (a gc callback; nothing else
# changes) and, to diagnose, run it without the cyclic collector (--edge-gc off).
EDGE_BOOT = """
import gc, os, runpy, sys, time
path = os.environ.get("BENCH_GC_LOG")
if path:
    out = open(path, "a", buffering=1)
    started = [0.0]
    def timed(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2:
            pause_ms = (time.perf_counter() - started[0]) * 1000
            out.write(f"{time.time() * 1000:.1f} {pause_ms:.2f}\\n")
    gc.callbacks.append(timed)
if os.environ.get("BENCH_EDGE_GC") == "off":
    gc.disable()
sys.argv = ["ws_edge"]
runpy.run_module("ws_edge", run_name="__main__", alter_sys=True)
"""


def gc_pauses(path: Path, window: Window | None = None) -> dict[str, float]:
    """The edge's full collections (from its gc log): count, total and longest pause (ms),
    in `window` or over the whole run."""
    pauses = []
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        at_ms, _, pause_ms = line.partition(" ")
        if window is None or float(at_ms) in window:
            pauses.append(float(pause_ms))
    return {"count": len(pauses), "total_ms": sum(pauses), "max_ms": max(pauses, default=0.0)}


def start_edge(env: dict[str, str], log_path: Path) -> Any:
    """The edge in its own process (an `runtime.processes.Child`: output to `log_path`, ready when
    it prints its ready line)."""
    import threading

    from infra.stack import REPO
    from runtime.processes import Child

    class EdgeProcess(Child):
        def __init__(self) -> None:  # Child's, with `-c EDGE_BOOT` for `-m ws_edge`
            self.name = "edge"
            self.log_path = log_path
            self.ready_line = None
            self._log = log_path.open("a")
            self.process = subprocess.Popen(
                [sys.executable, "-c", EDGE_BOOT],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            self._ready = threading.Event()
            threading.Thread(target=self._pump, daemon=True).start()

    return EdgeProcess()


# ---- one size ---------------------------------------------------------------------------------
def run_direct(n: int, args: argparse.Namespace, base: Any) -> dict[str, Any]:
    """The direct baseline at N streams: pump → Redis → one relay subscriber."""
    from schemas.channels import RedisNames

    namespace = f"bench-direct-{uuid.uuid4().hex[:6]}"
    settings = base.__class__.from_env(namespace=namespace)
    channel = RedisNames.for_namespace(namespace).edge_channel(DIRECT_EDGE)
    rate = stream_rate(n, args.tokens_per_s, args.max_offered)
    config = {
        "namespace": namespace,
        "redis_url": settings.redis_url,
        "kafka_bootstrap": settings.kafka_bootstrap,
        "tokens_per_s": rate,
        "phases": phases_for(rate, args.steps_per_s),
    }
    subscriber = Peer("subscriber", "subscriber", config)
    pump = Peer("pump", "pump", config)
    try:
        subscriber.call("start", channel, n)
        pump.call("start", n, channel)
        meter = CpuMeter(
            {"pump": pump.pid, "subscriber": subscriber.pid, "redis": redis_pid(base.redis_url)}
        )
        window = open_window(args.warmup_s, args.direct_seconds, [subscriber])
        time.sleep(max(window.start_ms / 1000 - time.time(), 0))
        meter.start()
        sleep_with_progress(window.end_ms / 1000 - time.time(), f"[{n}] direct baseline")
        cpu = meter.stop()
        time.sleep(0.5)  # the window's last frames in flight
        received = subscriber.call("report")
        pumped = pump.call("stats", window.start_ms, window.end_ms)
    finally:
        pump.close()
        subscriber.close()
        clean_namespace(settings)
    delays = merge_reports([received])["delays"]
    return {
        "delays": delays,
        "tokens_per_s": received["tokens"] / window.seconds,
        "offered_tokens_per_s": pumped["tokens"] / window.seconds,
        "gaps": received["gaps"],
        "duplicates": received["duplicates"],
        "pump_late_steps": pumped["late_steps"],
        "cpu_percent": cpu,
        "delay_ms": summary(delays),
    }


def open_window(warmup_s: float, seconds: float, peers: Sequence[Peer]) -> Window:
    start = time.time() * 1000 + warmup_s * 1000
    window = Window(start, start + seconds * 1000)
    call_all(peers, "window", [(window.start_ms, window.end_ms)] * len(peers))
    return window


class EdgeRun:
    """N clients on one edge process, each streaming one answer (see the module doc): one
    method per phase, each adding its numbers to `row`."""

    def __init__(self, n: int, args: argparse.Namespace, base: Any) -> None:
        from runtime.processes import free_port

        self.n = n
        self.args = args
        self.run = uuid.uuid4().hex[:6]
        self.registry = Path(tempfile.mkdtemp(prefix="bench-conn-")) / "tenants.json"
        unlimited = {
            "requests_per_minute": 10_000_000,
            "request_burst": 1_000_000,
            "tokens_per_minute": 1_000_000_000,
            "token_burst": 100_000_000,
        }
        tenants = {TENANT: {"tier": "enterprise", "limits": unlimited}}
        self.registry.write_text(json.dumps({"tenants": tenants}))
        self.settings = base.__class__.from_env(
            namespace=f"bench-conn-{self.run}",
            edge_port=free_port(),
            edge_id=f"bench-edge-{self.run}",
            tenant_registry_path=str(self.registry),
            log_level="WARNING",
        )
        self.procs = max(1, math.ceil(n / args.per_client_proc))
        self.tracked = split(args.resume, self.procs)
        self.edge_log = self.settings.state_path / "logs" / f"bench-connections-edge-{n}.log"
        self.gc_log = self.edge_log.with_suffix(".gc")
        self.edge: Any = None
        self.edge_pid = 0
        self.pump: Peer | None = None
        self.peers: list[Peer] = []
        self.probe: HandshakeProbe | None = None
        self.accepted = 0
        self.row: dict[str, Any] = {
            "connections_tried": n,
            "client_procs": self.procs,
            "stream_tokens_per_s": stream_rate(n, args.tokens_per_s, args.max_offered),
        }

    def label(self, text: str) -> str:
        return f"[{self.n}] {text}"

    def measure(self, direct: dict[str, Any]) -> dict[str, Any]:
        try:
            self.start()
            self.connect()
            self.create_turns()
            self.stream(direct)
            self.resume()
            self.finish()
        finally:
            self.stop()
        return self.row

    def start(self) -> None:
        """The edge (its own process, `python -m ws_edge`), the pump, the client processes."""
        from runtime.kafka_topics import ensure_topics
        from runtime.settings import settings_env
        from schemas.topics import TURNS_SUBMITTED

        settings = self.settings
        asyncio.run(ensure_topics(settings.kafka_bootstrap, settings.namespace, (TURNS_SUBMITTED,)))
        self.edge_log.parent.mkdir(parents=True, exist_ok=True)
        self.edge_log.unlink(missing_ok=True)
        env = {**os.environ, **settings_env(settings), "PYTHONUNBUFFERED": "1"}
        self.gc_log.unlink(missing_ok=True)
        env |= {"BENCH_GC_LOG": str(self.gc_log), "BENCH_EDGE_GC": self.args.edge_gc}
        self.edge = start_edge(env, self.edge_log)
        self.edge.wait_ready(timeout_s=60)
        self.edge_pid = self.edge.process.pid
        time.sleep(1.0)  # imports settled, Kafka producer connecting
        self.row["edge_rss_kb_before"] = rss_kb(self.edge_pid)
        pump_config = {
            "namespace": settings.namespace,
            "redis_url": settings.redis_url,
            "kafka_bootstrap": settings.kafka_bootstrap,
            "tokens_per_s": self.row["stream_tokens_per_s"],
            "phases": phases_for(self.row["stream_tokens_per_s"], self.args.steps_per_s),
            "topic": TURNS_SUBMITTED.full_name(settings.namespace),
            "hold": True,  # turns are created on a quiet edge; tokens start together
        }
        self.pump = Peer("pump", "pump", pump_config)
        self.pump.call("start", 0, "")
        for i, count in enumerate(split(self.n, self.procs)):
            config = {
                "url": f"ws://127.0.0.1:{settings.edge_port}/",
                "secret": settings.auth_secret,
                "proc": i,
                "run": self.run,
                "count": count,
                "tracked": self.tracked[i],
                "connect_concurrency": self.args.connect_concurrency,
            }
            self.peers.append(Peer(f"clients{i}", "clients", config))

    def call(self, command: str, args: Sequence[tuple[Any, ...]], **options: Any) -> list[Any]:
        return call_all(self.peers, command, args, **options)

    def connect(self) -> None:
        started = time.monotonic()
        overflows = listen_overflows()
        none: list[tuple[Any, ...]] = [()] * self.procs
        connected = self.call(
            "connect", none, timeout_s=600, label=self.label("connecting"), total=self.n
        )
        connect_s = time.monotonic() - started
        self.row["listen_overflows_connect"] = listen_overflows() - overflows
        connect_ms = [t for c in connected for t in c["connect_ms"]]
        held = len(connect_ms)
        time.sleep(1.0)
        before, idle = self.row["edge_rss_kb_before"], rss_kb(self.edge_pid)
        failures: Counter[str] = Counter()
        for c in connected:
            failures.update(c["failure_kinds"])
        progress(
            self.label(
                f"{held} connected in {connect_s:.1f} s; edge RSS {before / 1024:.0f} → "
                f"{idle / 1024:.0f} MiB"
            )
            + (f"; failures {dict(failures)}" if failures else "")
        )
        examples = [e for c in connected for e in c["failure_examples"]][:3]
        if examples:
            progress(self.label(f"e.g. {examples}"))
        self.row.update(
            connections=held,
            connect_failures=dict(failures),
            connect_failure_examples=examples,
            connect_s=connect_s,
            connect_ms=summary(connect_ms),
            connects_per_s=held / connect_s if connect_s else math.nan,
            edge_rss_kb_idle=idle,
            rss_kb_per_conn=(idle - before) / held if held else math.nan,
        )

    def create_turns(self) -> None:
        """Every connection sends a real `turn.create`; wait until the pump streams them."""
        assert self.pump is not None
        started = time.monotonic()
        shares = split(self.args.create_concurrency, self.procs)
        rate = self.args.create_rate / self.procs
        created = self.call(
            "create",
            [(rate, max(share, 1)) for share in shares],
            timeout_s=600,
            label=self.label("turns"),
            total=self.row["connections"],
        )
        self.accepted = sum(c["accepted"] for c in created)
        errors: Counter[str] = Counter()
        for c in created:
            errors.update(c["errors"])
        create_s = time.monotonic() - started
        self.row.update(
            turns_accepted=self.accepted,
            turn_errors=dict(errors),
            turn_retries=sum(c["retries"] for c in created),
            create_s=create_s,
            turns_admitted_per_s=self.accepted / create_s if create_s else math.nan,
            accept_ms=summary([t for c in created for t in c["accept_ms"]]),
        )
        progress(
            self.label(f"{self.accepted} turns accepted in {self.row['create_s']:.1f} s")
            + (f"; refused {dict(errors)}" if errors else "")
        )
        deadline = time.monotonic() + 60
        while (streams := self.pump.call("count")["streams"]) < self.accepted:
            if time.monotonic() > deadline:
                progress(self.label(f"the pump saw only {streams}/{self.accepted} turns"))
                break
            time.sleep(0.5)
        self.pump.call("go")
        rate = self.row["stream_tokens_per_s"]
        progress(self.label(f"{streams} streams at {rate:g} tokens/s each"))

    def stream(self, direct: dict[str, Any]) -> None:
        """The measured window: delivery at the clients, CPU of every process."""
        assert self.pump is not None
        args = self.args
        meter = CpuMeter(
            {
                "edge": self.edge_pid,
                "redis": redis_pid(self.settings.redis_url) or 0,
                "kafka": find_pid("kafka.Kafka") or 0,
                "pump": self.pump.pid,
                **{p.name: p.pid for p in self.peers},
            }
        )
        from ws_edge.auth import mint_token

        token = mint_token(self.settings.auth_secret, "probe", TENANT)
        self.probe = HandshakeProbe(self.settings.edge_port, token)
        window = open_window(args.warmup_s, args.seconds, self.peers)
        time.sleep(max(window.start_ms / 1000 - time.time(), 0))
        meter.start()
        profile = None
        if args.profile and self.n == max(args.connections):
            profile = start_profile(self.edge_pid, args.seconds, self.n)
        sleep_with_progress(window.end_ms / 1000 - time.time(), self.label("streaming"))
        cpu = meter.stop()
        cpu["clients"] = sum(cpu.pop(p.name) for p in self.peers)
        rss_streaming = rss_kb(self.edge_pid)
        self.row["edge_gc_window"] = gc_pauses(self.gc_log, window)
        self.row["handshake_window_ms"] = self.probe.between(window)
        time.sleep(1.0)  # the window's last frames in flight
        received = merge_reports(self.call("report", [()] * self.procs))
        pumped = self.pump.call("stats", window.start_ms, window.end_ms)
        stats = delivery_stats(received, window.seconds, direct["delays"])
        edge_cpu_s = cpu["edge"] / 100 * window.seconds
        self.row.update(
            stats,
            offered_tokens_per_s=pumped["tokens"] / window.seconds,
            pump_late_steps=pumped["late_steps"],
            pump_refused=pumped["refused"],
            pump_duplicate_turns=pumped["duplicate_turns"],
            edge_rss_kb_streaming=rss_streaming,
            cpu_percent=cpu,
            edge_cpu_us_per_token=1e6 * edge_cpu_s / max(received["tokens"], 1),
            delays=received["delays"],
        )
        progress(
            self.label(
                f"{stats['tokens_per_s']:.0f} tokens/s in {stats['frames_per_s']:.0f} frames/s "
                f"(offered {self.row['offered_tokens_per_s']:.0f}); delay p50 "
                f"{stats['delay_ms']['p50']:.1f} p99 {stats['delay_ms']['p99']:.1f} ms; "
                f"edge CPU {cpu['edge']:.0f}%"
            )
        )
        if profile is not None:
            self.row["profile"] = finish_profile(*profile)

    def resume(self) -> None:
        rate = self.args.resume_rate / self.procs
        # offline for two token intervals at least: tokens were made meanwhile, so the first
        # resumed delta comes from the log (not from waiting for the next token)
        gap_s = max(self.args.resume_gap_s, 2 / self.row["stream_tokens_per_s"])
        args = [(t, gap_s, rate) for t in self.tracked]
        started_ms = time.time() * 1000
        overflows = listen_overflows()
        resumed = self.call("resume", args, timeout_s=180)
        self.row["listen_overflows_resume"] = listen_overflows() - overflows
        phase = Window(started_ms, time.time() * 1000)
        self.row["edge_gc_resume"] = gc_pauses(self.gc_log, phase) | {"seconds": phase.seconds}
        self.probe.stop()
        self.row["handshake_resume_ms"] = self.probe.between(phase)
        resume_ms = [t for r in resumed for t in r["resume_ms"]]
        statuses: Counter[str] = Counter()
        for r in resumed:
            statuses.update(r["statuses"])
        self.row.update(
            resume_gap_s=gap_s,
            resume_open_ms=summary([t[0] for r in resumed for t in r["steps_ms"]]),
            resume_ready_ms=summary([t[1] for r in resumed for t in r["steps_ms"]]),
            resume_resumed_ms=summary([t[2] for r in resumed for t in r["steps_ms"]]),
            resume_ms=summary(resume_ms),
            resume_tried=sum(r["tried"] for r in resumed),
            resume_statuses=dict(statuses),
            resume_errors=[e for r in resumed for e in r["errors"]][:5],
            resume_samples=resume_ms,
        )
        progress(
            self.label(
                f"{len(resume_ms)}/{self.row['resume_tried']} resumed: p50 "
                f"{self.row['resume_ms']['p50']:.0f} ms, p99 {self.row['resume_ms']['p99']:.0f} ms"
            )
        )

    def finish(self) -> None:
        """The pump ends every answer; each client checks what it received."""
        assert self.pump is not None
        self.pump.conn.send(("finish", (self.args.finish_rate,)))
        wait_s = max(60.0, 2 * self.accepted / self.args.finish_rate)
        checked = self.call(
            "collect",
            [(wait_s,)] * self.procs,
            timeout_s=wait_s + 60,
            label=self.label("answers done"),
            total=self.accepted,
        )
        kind, payload = self.pump.conn.recv()
        if kind == "error":
            raise BenchError(f"the pump failed to finish:\n{payload}")
        keys = ("turns", "done", "verified", "gaps", "duplicates", "length_mismatches")
        check: dict[str, Any] = {k: sum(c[k] for c in checked) for k in keys}
        check["resumed"] = sum(c["resumed"] for c in checked)
        check["resumed_verified"] = sum(c["resumed_verified"] for c in checked)
        check["resumed_examples"] = [e for c in checked for e in c["resumed_examples"]][:5]
        self.row["check"] = check
        progress(self.label(f"check: {check}"))

    def stop(self) -> None:
        if self.probe is not None:
            self.probe.stop()
        for peer in self.peers:
            peer.close()
        if self.pump is not None:
            self.pump.close()
        if self.edge is not None:
            self.edge.stop()
        self.row["edge_log"] = edge_log_facts(self.edge_log)
        self.row["edge_gc_run"] = gc_pauses(self.gc_log)
        self.row["edge_log_path"] = str(self.edge_log)
        clean_namespace(self.settings)
        shutil.rmtree(self.registry.parent, ignore_errors=True)


def start_profile(pid: int, seconds: float, n: int) -> tuple[subprocess.Popen, Path] | None:
    """py-spy on the edge for the window (sampling from outside: the edge is not slowed)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        progress("py-spy not found: no profile")
        return None
    out = RESULTS / f"connections-edge-profile-{n}.txt"
    RESULTS.mkdir(parents=True, exist_ok=True)
    command = [spy, "record", "-d", str(max(1, int(seconds) - 1)), "-r", "30", "--nonblocking"]
    command += ["--format", "raw", "-o", str(out), "--pid", str(pid)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, out


def finish_profile(process: subprocess.Popen, out: Path) -> dict[str, Any]:
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(30)
    if not out.exists():
        return {}
    return summarize_profile(out.read_text().splitlines()) | {"path": str(out)}


def summarize_profile(lines: Sequence[str], top: int = 15) -> dict[str, Any]:
    """py-spy's raw (collapsed) stacks: the share of samples by leaf function (self) and by
    file (inclusive: anywhere on the stack)."""
    leaf: Counter[str] = Counter()
    files: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        leaf[_frame_name(frames[-1])] += count
        for name in {_frame_file(f) for f in frames}:
            files[name] += count
    if not total:
        return {}
    return {
        "samples": total,
        "self": [(name, count / total) for name, count in leaf.most_common(top)],
        "inclusive_by_file": [(name, count / total) for name, count in files.most_common(top)],
    }


def _frame_name(frame: str) -> str:
    """`func (path/to/file.py:12)` → `func (file.py)`."""
    name, _, where = frame.partition(" (")
    return f"{name} ({_frame_file(frame)})" if where else name


def _frame_file(frame: str) -> str:
    """`func (path/to/file.py:12)` → `path/to/file.py` (installed packages from their own
    folder on)."""
    _, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return path.split("site-packages/", 1)[-1] or frame


# ---- reporting ---------------------------------------------------------------------------------
def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'N':>6} {'held':>6} {'tok/s/str':>9} {'conn p50/p99 ms':>15} {'conn/s':>6} "
        f"{'RSS KB/conn':>11} "
        f"{'offered':>8} {'tok/s':>7} {'frames/s':>8} {'tok/fr':>6} {'delay p50/p99 ms':>17} "
        f"{'direct p50/p99':>15} {'added p50/p99':>14} {'edge CPU':>8} {'us/tok':>6} "
        f"{'resume p50/p99 ms':>17} {'ok':>11}"
    )
    for r in rows:
        d, dd = r["delay_ms"], r["direct_delay_ms"]
        check = r["check"]
        print(
            f"{r['connections_tried']:>6} {r['connections']:>6} {r['stream_tokens_per_s']:>9.2f} "
            f"{r['connect_ms']['p50']:>7.0f}/{r['connect_ms']['p99']:<7.0f} "
            f"{r['connects_per_s']:>6.0f} {r['rss_kb_per_conn']:>11.1f} "
            f"{r['offered_tokens_per_s']:>8.0f} {r['tokens_per_s']:>7.0f} "
            f"{r['frames_per_s']:>8.0f} {r['tokens_per_frame']:>6.2f} "
            f"{d['p50']:>8.1f}/{d['p99']:<8.1f} {dd['p50']:>7.1f}/{dd['p99']:<7.1f} "
            f"{r['added_p50_ms']:>6.1f}/{r['added_p99_ms']:<7.1f} "
            f"{r['cpu_percent']['edge']:>7.0f}% {r['edge_cpu_us_per_token']:>6.0f} "
            f"{r['resume_ms']['p50']:>8.0f}/{r['resume_ms']['p99']:<8.0f} "
            f"{check['verified']:>5}/{check['turns']:<5}"
        )
    print("\nCPU % in the window (100 = one core; 'others': everything else on the machine)")
    for r in rows:
        cpu = ", ".join(f"{k} {v:.0f}" for k, v in r["cpu_percent"].items())
        print(f"{r['connections_tried']:>6}: {cpu}")
        print(
            f"{'':>6}  direct baseline: "
            + ", ".join(f"{k} {v:.0f}" for k, v in r["direct"]["cpu_percent"].items())
            + f"; direct tokens/s {r['direct']['tokens_per_s']:.0f}"
        )
    print("\nthe edge's full garbage collections (gen 2): count, total / longest pause")
    for r in rows:
        parts = []
        for key, what in (("window", "window"), ("resume", "resume phase"), ("run", "whole run")):
            gc_row = r.get(f"edge_gc_{key}")
            if gc_row:
                parts.append(
                    f"{what} {gc_row['count']}, {gc_row['total_ms']:.0f} / "
                    f"{gc_row['max_ms']:.0f} ms"
                )
        print(f"{r['connections_tried']:>6}: " + "; ".join(parts))
    print("\nchecks and the edge's log")
    for r in rows:
        c = r["check"]
        print(
            f"{r['connections_tried']:>6}: done {c['done']}/{c['turns']}, gaps {c['gaps']}, "
            f"duplicates {c['duplicates']}, length mismatches {c['length_mismatches']}, "
            f"resumed {c['resumed_verified']}/{c['resumed']} whole "
            f"({r['resume_statuses']}); turns refused {r['turn_errors'] or 0}, "
            f"retried {r['turn_retries']}, delivered twice by Kafka {r['pump_duplicate_turns']}, "
            f"admitted {r['turns_admitted_per_s']:.0f}/s (accepted p50 {r['accept_ms']['p50']:.0f} "
            f"p99 {r['accept_ms']['p99']:.0f} ms); "
            f"edge log {r['edge_log']}"
        )
    print(
        "\nresume, from the reconnect's start: WebSocket open → session.ready → "
        "response.resumed → first resumed delta"
    )
    for r in rows:
        steps = (r["resume_open_ms"], r["resume_ready_ms"], r["resume_resumed_ms"], r["resume_ms"])
        print(
            f"{r['connections_tried']:>6}: "
            + " → ".join(f"p50 {s['p50']:.0f} p99 {s['p99']:.0f} ms" for s in steps)
            + f" (offline {r['resume_gap_s']:g} s first; accept-queue overflows: connecting "
            f"{r['listen_overflows_connect']}, resuming {r['listen_overflows_resume']})"
        )
    print("\na new client's handshake (connect → 101), from the idle parent process, every 0.25 s")
    for r in rows:
        parts = []
        for key, what in (("window", "streaming window"), ("resume", "resume phase")):
            h = r.get(f"handshake_{key}_ms")
            if h:
                parts.append(
                    f"{what}: p50 {h['p50']:.0f} p99 {h['p99']:.0f} max {h['max']:.0f} ms "
                    f"({h['n']} ok, {h['failed']} failed)"
                )
        print(f"{r['connections_tried']:>6}: " + "; ".join(parts))
    if len(rows) > 1:
        print(f"\nagainst the {rows[0]['connections_tried']}-connection run (ratios)")
        for r in rows[1:]:
            vs = r["versus_baseline"]
            print(
                f"{r['connections_tried']:>6}: " + ", ".join(f"{k} {v:.2f}" for k, v in vs.items())
            )
    for r in rows:
        profile = r.get("profile")
        if profile:
            print(f"\nedge profile at {r['connections_tried']} ({profile['samples']} samples)")
            print("  self time by function:")
            for name, share in profile["self"]:
                print(f"    {share:6.1%}  {name}")
            print("  inclusive by file:")
            for name, share in profile["inclusive_by_file"]:
                print(f"    {share:6.1%}  {name}")


def plot(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.8))
    for r in rows:
        for values, style, what in (
            (r["delays"], "-", "edge"),
            (r["direct"]["delays"], "--", "direct Redis"),
        ):
            points = quantiles(values, 400)
            if points:
                ys = [i / (len(points) - 1) for i in range(len(points))]
                left.plot(
                    [max(p, 0.01) for p in points],
                    ys,
                    style,
                    label=f"{r['connections_tried']} streams, {what}",
                )
    left.set_xscale("log")
    left.set_xlabel("delivery delay, publish → client (ms, log)")
    left.set_ylabel("fraction of tokens")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    names = [str(r["connections_tried"]) for r in rows]
    xs = range(len(rows))
    middle.bar(
        [x - 0.27 for x in xs],
        [r["offered_tokens_per_s"] for r in rows],
        0.27,
        label="offered (pump)",
    )
    middle.bar(list(xs), [r["tokens_per_s"] for r in rows], 0.27, label="delivered tokens/s")
    middle.bar(
        [x + 0.27 for x in xs], [r["frames_per_s"] for r in rows], 0.27, label="delta frames/s"
    )
    middle.set_xticks(list(xs), names)
    middle.set_xlabel("concurrent streams (one edge process)")
    middle.legend(fontsize=8)
    middle.grid(alpha=0.3, axis="y")
    for r in rows:
        points = sorted(r["resume_samples"])
        if points:
            ys = [(i + 1) / len(points) for i in range(len(points))]
            right.plot(points, ys, label=f"{r['connections_tried']} streams")
    right.set_xlabel("reconnect → first resumed delta (ms)")
    right.set_ylabel("fraction of resumes")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    fig.suptitle(
        "one edge process; tokens/s per stream: "
        + ", ".join(f"{r['stream_tokens_per_s']:g} at {r['connections_tried']}" for r in rows)
        + f"; {args.seconds:g} s window, {os.cpu_count()} cores shared by edge, clients, pump, "
        "Redis, Kafka"
    )
    fig.tight_layout()
    save_figure(fig, "connections")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.connections",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--connections",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1000, 10000],
        help="concurrent streams per run, comma-separated (the first is the baseline)",
    )
    parser.add_argument("--tokens-per-s", type=float, default=20.0, help="per stream")
    parser.add_argument(
        "--max-offered",
        type=float,
        default=5000.0,
        help="cap on all streams' tokens/s together (0: none); see the module doc",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window")
    parser.add_argument("--direct-seconds", type=float, default=6.0, help="direct baseline")
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--steps-per-s", type=float, default=200, help="pump decode steps a second")
    parser.add_argument("--resume", type=int, default=200, help="streams dropped and resumed")
    parser.add_argument("--resume-gap-s", type=float, default=0.5, help="offline before reconnect")
    parser.add_argument("--resume-rate", type=float, default=50, help="connections dropped per s")
    parser.add_argument("--create-rate", type=float, default=2000, help="turn.create per s, max")
    parser.add_argument(
        "--create-concurrency", type=int, default=64, help="turn.create unanswered at once"
    )
    parser.add_argument("--finish-rate", type=float, default=2000, help="answers ended per s")
    parser.add_argument("--connect-concurrency", type=int, default=50, help="per client process")
    parser.add_argument("--per-client-proc", type=int, default=5000)
    parser.add_argument("--profile", action="store_true", help="py-spy the largest run's edge")
    parser.add_argument(
        "--edge-gc",
        choices=["on", "off"],
        default="on",
        help="off: the edge without the cyclic garbage collector (a diagnosis, not a setting)",
    )
    args = parser.parse_args()

    from runtime.settings import Settings

    limit = raise_nofile()
    base = Settings.from_env()
    started = time.perf_counter()
    progress(f"RLIMIT_NOFILE {limit}; {os.cpu_count()} cores; logs in {base.state_path / 'logs'}")
    rows: list[dict[str, Any]] = []
    for n in args.connections:
        print(f"[{n} connections]", file=sys.stderr, flush=True)
        needed = n + 200
        if needed > limit:
            progress(f"[{n}] needs ~{needed} fds in the edge process, the limit is {limit}")
        direct = run_direct(n, args, base)
        progress(
            f"[{n}] direct: {direct['tokens_per_s']:.0f} tokens/s, delay p50 "
            f"{direct['delay_ms']['p50']:.1f} p99 {direct['delay_ms']['p99']:.1f} ms"
        )
        row = EdgeRun(n, args, base).measure(direct)
        row["direct"] = direct
        rows.append(row)
    for r in rows[1:]:
        r["versus_baseline"] = versus(r, rows[0])
    print_table(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    slim = []
    for r in rows:
        kept = {k: v for k, v in r.items() if k not in ("delays", "direct", "resume_samples")}
        kept["delay_quantiles_ms"] = quantiles(r["delays"])
        kept["direct"] = {k: v for k, v in r["direct"].items() if k != "delays"}
        kept["direct"]["delay_quantiles_ms"] = quantiles(r["direct"]["delays"])
        kept["resume_samples_ms"] = r["resume_samples"]
        slim.append(kept)
    machine = {"cores": os.cpu_count(), "nofile": limit}
    (RESULTS / "connections.json").write_text(
        json.dumps({"args": vars(args), "machine": machine, "rows": slim}, indent=1, default=str)
    )
    plot(rows, args)
    print("\nwrote bench/results/connections.json and bench/figures/connections.png")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

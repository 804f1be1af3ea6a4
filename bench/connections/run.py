"""One size of the benchmark: the direct baseline and one run through the edge (and its
profile)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.connections.common import DIRECT_EDGE, TENANT, progress
from bench.connections.parent import (
    BenchError,
    HandshakeProbe,
    Peer,
    call_all,
    clean_namespace,
    edge_log_facts,
    gc_pauses,
    redis_pid,
    sleep_with_progress,
    start_edge,
)
from bench.connections.stats import (
    Window,
    delivery_stats,
    merge_reports,
    phases_for,
    split,
    stream_rate,
)
from bench.connections.system import CpuMeter, find_pid, listen_overflows, rss_kb
from bench.plotting import RESULTS
from bench.stats import summary


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

    def __init__(
        self, n: int, args: argparse.Namespace, base: Any, gc_mode: str = "keeper"
    ) -> None:
        from runtime.processes import free_port

        self.n = n
        self.args = args
        self.gc_mode = gc_mode
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
            edge_http_port=free_port(),
            edge_id=f"bench-edge-{self.run}",
            tenant_registry_path=str(self.registry),
            log_level="WARNING",
            # the shipped edge's heap keeper, or CPython's collector alone (the baseline)
            edge_heap_freeze_s=0.0 if gc_mode in ("cpython", "off") else base.edge_heap_freeze_s,
        )
        self.procs = max(1, math.ceil(n / args.per_client_proc))
        self.tracked = split(args.resume, self.procs)
        self.edge_log = (
            self.settings.state_path / "logs" / f"bench-connections-edge-{n}-{gc_mode}.log"
        )
        self.gc_log = self.edge_log.with_suffix(".gc")
        self.edge: Any = None
        self.edge_pid = 0
        self.pump: Peer | None = None
        self.peers: list[Peer] = []
        self.probe: HandshakeProbe | None = None
        self.accepted = 0
        self.row: dict[str, Any] = {
            "connections_tried": n,
            "edge_gc": gc_mode,
            "label": f"{n}" if len(args.edge_gc) == 1 else f"{n} {gc_mode}",
            "client_procs": self.procs,
            "stream_tokens_per_s": stream_rate(n, args.tokens_per_s, args.max_offered),
        }

    def label(self, text: str) -> str:
        return f"[{self.row['label']}] {text}"

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
        env |= {"BENCH_GC_LOG": str(self.gc_log), "BENCH_EDGE_GC": self.gc_mode}
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
                "http_url": f"http://127.0.0.1:{settings.edge_http_port}",
                "secret": settings.auth_secret,
                "proc": i,
                "run": self.run,
                "count": count,
                "tracked": self.tracked[i],
                "connect_concurrency": self.args.connect_concurrency,
            }
            role = "sse-clients" if self.args.door == "sse" else "clients"
            self.peers.append(Peer(f"clients{i}", role, config))

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
        # an SSE stream has no connect of its own: its turn's request opens it
        held = len(connect_ms) if self.args.door == "websocket" else self.n
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
        if self.args.door == "sse":  # the streams' connections were made by their turns
            open_rss = rss_kb(self.edge_pid)
            self.row["edge_rss_kb_idle"] = open_rss
            before = self.row["edge_rss_kb_before"]
            per = (open_rss - before) / self.accepted if self.accepted else math.nan
            self.row["rss_kb_per_conn"] = per
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
            profile = start_profile(
                self.edge_pid, args.seconds, self.row["label"].replace(" ", "-")
            )
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


def start_profile(pid: int, seconds: float, n: str) -> tuple[subprocess.Popen, Path] | None:
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

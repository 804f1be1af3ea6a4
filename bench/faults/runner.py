"""Runs the suite: isolated services, the roles, then for each fault a steady load, the
fault, its healing, a quiet period, and the books.

Per scenario: the load runs `warmup_s`, the fault strikes (for the worker and edge kills,
once answers are streaming), lasts the scenario's outage, is healed (the role or service
restarted), the load goes on `after_s` more, then no new turn starts and the clients finish
(or give up after their turn deadline). The books then read `turns.completed` from Kafka
and `traces` from ClickHouse. Each scenario has its own users and conversations, so its
books hold only its turns. A role that died on its own is noted and restarted before the
next fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.faults.books import (
    Books,
    Kind,
    Outcome,
    TurnHistory,
    Verdict,
    balance,
    history_breaks,
    open_at,
    recovery_s,
    slowest_touched_s,
    verdicts_of,
    was_accepted,
)
from bench.faults.load import Clock, LoadConfig, run_load
from bench.faults.records import completions, wait_for_traces
from bench.faults.scenarios import (
    CLUSTER_SCENARIOS,
    SCENARIOS,
    FaultContext,
    Scenario,
    wait_until_streaming,
    wait_until_worker_busy,
)
from bench.faults.services import CLUSTER_NODES, IsolatedServices, isolated_services
from bench.faults.stack import FaultStack, roles
from bench.faults.tool_books import SideEffectBooks
from bench.faults.tool_scenario import LINGER_S, run_tool_scenario, tool_env
from harness.mcp_servers.running import kv_store_server
from runtime.settings import Settings
from runtime.smollm2 import default_model_dir

Progress = Callable[[str], None]
ALL_SCENARIOS = {**SCENARIOS, **CLUSTER_SCENARIOS}


def stderr_progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class SuiteOptions:
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    load: LoadConfig = field(default_factory=LoadConfig)
    engine: str = "fake"
    token_interval_ms: float = 20.0  # the fake engine's pace
    warmup_s: float = 8.0
    after_s: float = 10.0
    workers: int = 2
    edges: int = 2
    keep_home: bool = False  # keep the run's TURNSTREAM_HOME (logs) after it
    cluster: bool = False  # a replicated 3-broker KRaft cluster instead of one broker
    # the tool scenario after the others (`tool_scenario`): a tools worker and a key-value
    # MCP server join the stack
    tools: bool = False


@dataclass
class SuiteRun:
    scenarios: list[ScenarioResult]
    tools: SideEffectBooks | None = None  # the tool scenario's books (when it ran)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.scenarios) and (self.tools is None or self.tools.balanced)


@dataclass
class ScenarioResult:
    name: str
    fault: str
    books: Books
    recovery_s: float
    started_at: float
    fault_at: float
    healed_at: float
    ended_at: float
    streaming_at_fault: int | None
    history_breaks: int
    slowest_turn_s: float = 0.0  # the longest a turn the fault touched took
    open_at_fault: int = 0  # accepted turns open when it struck
    settled_s: float | None = None  # after the heal, until its traces were gone (in sync)
    struck: list[str] = field(default_factory=list)  # what the fault hit, in words
    fault_hit: bool | None = None  # the books show it struck work in flight (None: no check)
    notes: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    histories: list[TurnHistory] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.books.balanced and self.history_breaks == 0 and self.fault_hit is not False


def suite_env(options: SuiteOptions) -> dict[str, str]:
    """What every role of the run is configured with (on top of the isolated services)."""
    env = {
        "TURNSTREAM_ENGINE": options.engine,
        "TURNSTREAM_FAKE_TOKEN_INTERVAL_MS": str(options.token_interval_ms),
        "TURNSTREAM_SAFETY_OUTPUT_POLICY": "off",  # no safety worker in this stack
    }
    if options.engine != "fake":
        developer = Settings.from_env()
        env["TURNSTREAM_MODEL_PATH"] = developer.model_path or str(default_model_dir(developer))
    return env


async def run_suite(options: SuiteOptions, progress: Progress = stderr_progress) -> SuiteRun:
    unknown = [s for s in options.scenarios if s not in ALL_SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenarios {unknown}; known: {list(ALL_SCENARIOS)}")
    needs_cluster = [s for s in options.scenarios if ALL_SCENARIOS[s].cluster]
    if needs_cluster and not options.cluster:
        raise ValueError(f"{needs_cluster} need the replicated cluster (--cluster)")
    clock = Clock()
    kafka = f"a {CLUSTER_NODES}-broker Kafka cluster" if options.cluster else "Kafka"
    progress(f"starting {kafka}, Redis and the ClickHouse migrations (isolated, own ports)...")
    services_cm = isolated_services(
        options.edges,
        suite_env(options),
        keep_home=options.keep_home,
        kafka_nodes=CLUSTER_NODES if options.cluster else 1,
    )
    services: IsolatedServices = await asyncio.to_thread(services_cm.__enter__)
    run = SuiteRun([])
    results = run.scenarios
    extras = contextlib.ExitStack()
    try:
        if options.tools:
            kv_url, kv_books = extras.enter_context(
                kv_store_server(services.home, linger_s=LINGER_S)
            )
            services.env.update(tool_env(kv_url))
        progress(
            f"  home {services.home}, Kafka {services.env['TURNSTREAM_KAFKA_BOOTSTRAP']}, "
            f"Redis {services.env['TURNSTREAM_REDIS_URL']} ({clock.now():.0f} s)"
        )
        stack = FaultStack(
            services.env,
            services.home / "logs",
            roles(
                options.workers,
                options.edges,
                services.ports.edge,
                services.ports.edge_http,
                cores=sorted(os.sched_getaffinity(0)) if options.engine == "vllm" else None,
                tools=options.tools,
            ),
            progress,
        )
        progress(f"starting the roles: {', '.join(stack.roles)}")
        await asyncio.to_thread(stack.start)
        try:
            for name in options.scenarios:
                result = await run_scenario(
                    ALL_SCENARIOS[name], FaultContext(stack, services, []), options, clock, progress
                )
                results.append(result)
            if options.tools:
                progress("tools-kill: tool calls while the tools worker is killed mid-call")
                run.tools = await run_tool_scenario(
                    stack, services.env, kv_books, progress=progress
                )
        finally:
            progress("stopping the roles...")
            await asyncio.to_thread(stack.stop)
    finally:
        extras.close()
        progress("stopping Kafka and Redis...")
        await asyncio.to_thread(services_cm.__exit__, None, None, None)
    return run


async def run_scenario(
    scenario: Scenario,
    ctx: FaultContext,
    options: SuiteOptions,
    clock: Clock,
    progress: Progress,
) -> ScenarioResult:
    histories = ctx.histories
    tag = f"[{scenario.name}]"
    progress(f"{tag} {scenario.fault}")
    stop = asyncio.Event()
    started_at = clock.now()
    urls = ctx.stack.edge_urls()
    tasks = await run_load(
        urls, ctx.services.settings.auth_secret, scenario.name, options.load, clock, histories, stop
    )
    ticker = asyncio.create_task(_tick(tag, histories, clock, progress))
    try:
        await asyncio.sleep(options.warmup_s)
        timeline = await _strike(scenario, ctx, clock, lambda line: progress(f"{tag} {line}"))
        await asyncio.sleep(max(0.0, options.after_s - (timeline.settled_s or 0.0)))
    finally:
        stop.set()
        progress(f"{tag} load stopped; waiting for open turns to end")
        _, pending = await asyncio.wait(tasks, timeout=options.load.turn_deadline_s + 30)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    ended_at = clock.now()
    progress(f"{tag} checking the books (turns.completed, traces)")
    records = await completions(ctx.services.settings)
    accepted = [h.turn_id for h in histories if h.turn_id and was_accepted(h)]
    traces = await asyncio.to_thread(
        wait_for_traces, ctx.services.settings, accepted, scenario.traces_wait_s
    )
    verdicts = verdicts_of(histories, records, traces)
    books = balance(verdicts)
    fault_at, healed_at = timeline.fault_at, timeline.healed_at
    open_then = open_at(verdicts, fault_at)
    fault_hit = None if scenario.hit is None else scenario.hit(books)
    if scenario.hit_open_turns:
        fault_hit = fault_hit is not False and open_then > 0
    notes = []
    died = ctx.stack.exited()
    if died:
        notes.append("died on their own: " + ", ".join(f"{k} (exit {c})" for k, c in died.items()))
        await asyncio.to_thread(ctx.stack.revive)
    result = ScenarioResult(
        name=scenario.name,
        fault=scenario.fault,
        books=books,
        recovery_s=recovery_s(verdicts, fault_at, healed_at),
        started_at=started_at,
        fault_at=fault_at,
        healed_at=healed_at,
        ended_at=ended_at,
        streaming_at_fault=timeline.streaming,
        history_breaks=history_breaks(histories, verdicts) if options.engine == "fake" else 0,
        slowest_turn_s=slowest_touched_s(verdicts, fault_at, healed_at),
        open_at_fault=open_then,
        settled_s=timeline.settled_s,
        struck=list(ctx.struck),
        fault_hit=fault_hit,
        notes=notes,
        verdicts=verdicts,
        histories=histories,
    )
    progress(f"{tag} {summary_line(result)}")
    return result


@dataclass(frozen=True, slots=True)
class Timeline:
    fault_at: float
    healed_at: float
    settled_s: float | None  # after the heal, until its traces were gone
    streaming: int | None  # answers streaming when it struck (for mid-stream faults)


async def _strike(
    scenario: Scenario, ctx: FaultContext, clock: Clock, progress: Progress
) -> Timeline:
    """Wait for what the fault must hit, cause it, keep it the outage, heal it, settle."""
    streaming: int | None = None
    if scenario.wait_mid_stream:
        streaming = await asyncio.to_thread(wait_until_streaming, ctx, scenario)
    if scenario.busy_worker is not None:
        held = await asyncio.to_thread(wait_until_worker_busy, ctx, scenario.busy_worker)
        progress(f"{scenario.busy_worker} holds {held} answers in flight")
    fault_at = clock.now()
    streaming_note = "" if streaming is None else f" ({streaming} answers streaming)"
    progress(f"fault at {fault_at:.1f} s{streaming_note}")
    await asyncio.to_thread(scenario.inject, ctx)
    for line in ctx.struck:
        progress(f"struck {line}")
    await asyncio.sleep(scenario.outage_s)
    await asyncio.to_thread(scenario.heal, ctx)
    healed_at = clock.now()
    progress(f"healed at {healed_at:.1f} s ({healed_at - fault_at:.1f} s after it)")
    settled_s = None
    if scenario.settle is not None:
        await asyncio.to_thread(scenario.settle, ctx)
        settled_s = clock.now() - healed_at
        progress(f"settled {settled_s:.1f} s after the heal")
    return Timeline(fault_at, healed_at, settled_s, streaming)


def problems(result: ScenarioResult) -> list[str]:
    """What is wrong with a fault's books, in words (empty: they balance and the fault hit
    work in flight); the tests assert it is empty."""
    b = result.books
    checks = [
        (b.accepted > 0, "no turn was accepted"),
        (b.lost == 0 and not math.isnan(result.recovery_s), f"{b.lost} accepted turns lost"),
        (b.answered_twice == 0, f"{b.answered_twice} answered twice"),
        (b.recorded_twice == 0, f"{b.recorded_twice} decided twice"),
        (b.not_as_recorded == 0, f"{b.not_as_recorded} answers differ from the record"),
        (b.text_mismatches == 0, f"{b.text_mismatches} streamed texts not whole"),
        (b.duplicate_frames == 0, f"{b.duplicate_frames} frames delivered twice"),
        (b.unrecorded == 0, f"{b.unrecorded} accepted turns not in turns.completed"),
        (b.traces_match, f"{b.traces_missing} traces missing, {b.traces_extra} extra"),
        (result.history_breaks == 0, f"{result.history_breaks} answers on a wrong history"),
        (not result.notes, "; ".join(result.notes)),
        (result.fault_hit is not False, "the fault hit nothing in flight"),
    ]
    return [what for ok, what in checks if not ok]


def summary_line(result: ScenarioResult) -> str:
    b = result.books
    state = "balanced" if result.ok else "NOT BALANCED"
    return (
        f"{state}: {b.accepted} accepted, {b.completed} completed, {b.clear_errors} clear "
        f"errors, {b.refused} refused, {b.lost} lost, {b.answered_twice} answered twice "
        f"({b.recorded_twice} decided twice, {b.resent} re-sent), "
        f"{b.text_mismatches} texts not whole, traces {b.traces}/{b.accepted}, "
        f"recovered in {result.recovery_s:.1f} s, slowest turn {result.slowest_turn_s:.1f} s"
        + ("; the fault hit nothing in flight" if result.fault_hit is False else "")
    )


async def _tick(tag: str, histories: list[TurnHistory], clock: Clock, progress: Progress) -> None:
    """A status line every 5 s while the load runs."""
    while True:
        await asyncio.sleep(5)
        ended = sum(1 for h in histories if h.of(Kind.DONE))
        refused = sum(1 for h in histories if h.of(Kind.REFUSED) and not was_accepted(h))
        open_ = sum(1 for h in histories if was_accepted(h) and not h.of(Kind.DONE))
        progress(
            f"{tag} {clock.now():6.1f} s: {len(histories)} turns, {ended} done, {open_} open, "
            f"{refused} refused so far"
        )


def failures(result: ScenarioResult, limit: int = 5) -> list[dict]:
    """A few turns that broke the books, with what their client saw (for the JSON)."""
    bad = [
        (h, v)
        for h, v in zip(result.histories, result.verdicts, strict=True)
        if v.outcome in (Outcome.LOST, Outcome.TWICE)
        or v.text_ok is False
        or v.duplicate_frames
        or v.recorded_as_seen is False
        or (v.accepted and (v.recordings != 1 or v.traces != 1))
    ]
    return [
        {
            "turn_id": v.turn_id,
            "user": h.user,
            "conversation_id": h.conversation_id,
            "outcome": str(v.outcome),
            "records": v.records,
            "answers": v.answers,
            "traces": v.traces,
            "text_ok": v.text_ok,
            "seen": [
                f"{s.at:.2f} {s.kind}"
                + (f" {s.epoch}-{s.offset}" if s.epoch is not None else "")
                + (f" {s.code}" if s.code else "")
                + (f" error={s.error}" if s.error else "")
                for s in h.seen
                if s.kind is not Kind.DELTA
            ],
            "deltas": [f"{s.epoch}-{s.offset} {s.text!r}" for s in h.of(Kind.DELTA)],
        }
        for h, v in bad[:limit]
    ]

"""The faults: how each one is caused and healed (blocking calls; the runner runs them in a
thread while the load goes on)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from redis import Redis as SyncRedis

from bench.faults.books import Books, Kind, TurnHistory
from bench.faults.cluster import busiest_leader
from bench.faults.services import IsolatedServices
from bench.faults.stack import FaultStack
from schemas.channels import RedisNames
from schemas.worker_state import decode_state


@dataclass
class FaultContext:
    stack: FaultStack
    services: IsolatedServices
    histories: list[TurnHistory]
    struck: list[str] = field(default_factory=list)  # what the fault hit, in words
    node: int | None = None  # the Kafka node a cluster fault struck


Step = Callable[[FaultContext], None]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    fault: str  # for the table
    inject: Step
    heal: Step
    outage_s: float = 0.0  # between inject and heal
    wait_mid_stream: bool = False  # strike while answers stream (not between turns)
    streaming_on_edge: int | None = None  # ... on this edge (index), for an edge's fault
    busy_worker: str | None = None  # ... and this worker (its id) holds answers in flight
    traces_wait_s: float = 90.0  # how long the books wait for the traces to land
    # what the books show when the fault hit work in flight (None: nothing to check): a
    # scenario that struck nothing proves nothing, so its books do not balance
    hit: Callable[[Books], bool] | None = None
    # ... and for faults the clients cannot see directly (a broker of a cluster): some
    # accepted turn was open when it struck
    hit_open_turns: bool = False
    # after the heal, until the fault's traces are gone (every partition in sync again);
    # timed apart from "recovered in", which is what the clients lived
    settle: Step | None = None
    cluster: bool = False  # needs the replicated cluster (`--cluster`)


def streaming_now(histories: list[TurnHistory], edge: str | None = None) -> int:
    """Turns whose client has seen a delta and no end yet (followed on `edge`, if named)."""
    return sum(
        1
        for h in histories
        if h.of(Kind.DELTA)
        and not h.of(Kind.DONE, Kind.GAVE_UP, Kind.RESUME_REFUSED)
        and (edge is None or h.edge == edge)
    )


def wait_until_streaming(
    ctx: FaultContext, scenario: Scenario, at_least: int = 2, timeout_s: float = 20.0
) -> int:
    """Until `at_least` answers stream (on the scenario's edge), or the time is up."""
    index = scenario.streaming_on_edge
    edge = None if index is None else ctx.stack.edge_urls()[index]
    wanted = at_least if edge is None else 1
    deadline = time.monotonic() + timeout_s
    while (n := streaming_now(ctx.histories, edge)) < wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


def wait_until_worker_busy(
    ctx: FaultContext, worker: str, at_least: int = 2, timeout_s: float = 20.0
) -> int:
    """Until the worker's state on the board says it holds `at_least` answers in flight
    (the board is up to 250 ms old: with two, one of them is still streaming when the kill
    comes), or the time is up; how many it held."""
    settings = ctx.services.settings
    names = RedisNames.for_namespace(settings.namespace)
    redis = SyncRedis.from_url(settings.redis_url)
    deadline = time.monotonic() + timeout_s
    held = 0
    try:
        while time.monotonic() < deadline:
            states = [
                decode_state(raw)
                for pool in settings.pool_names
                for raw in redis.hgetall(names.worker_states_key(pool)).values()
            ]
            held = sum(s.in_flight for s in states if worker in s.worker_id)
            if held >= at_least:
                return held
            time.sleep(0.05)
        return held
    finally:
        redis.close()


def _kill(key: str) -> Step:
    return lambda ctx: ctx.stack.kill(key)


def _restart(key: str) -> Step:
    return lambda ctx: ctx.stack.restart(key)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "worker-kill",
            "kill -9 an inference worker mid-stream, restart it",
            _kill("inference-1"),
            _restart("inference-1"),
            wait_mid_stream=True,
            busy_worker="faults-worker-1",
            hit=lambda books: books.restarted > 0,  # its answers restarted on the other
        ),
        Scenario(
            "kafka-restart",
            "restart the Kafka broker (stop, start on the same data)",
            lambda ctx: ctx.services.stop_kafka(),
            lambda ctx: ctx.services.start_kafka(),
        ),
        Scenario(
            "redis-restart",
            "restart Redis (stop, 3 s down, start on its append-only file)",
            lambda ctx: ctx.services.stop_redis(),
            lambda ctx: ctx.services.start_redis(),
            outage_s=3.0,
        ),
        Scenario(
            "clickhouse-down",
            "ClickHouse down 20 s (kill -9 the sink that owns the embedded engine)",
            _kill("sink"),
            _restart("sink"),
            outage_s=20.0,
            traces_wait_s=150.0,
        ),
        Scenario(
            "edge-kill",
            "kill -9 an edge with clients attached (they resume on the other)",
            _kill("edge-1"),
            _restart("edge-1"),
            outage_s=3.0,
            wait_mid_stream=True,
            streaming_on_edge=0,
            hit=lambda books: books.resumed > 0,  # its clients resumed on the other
        ),
        Scenario(
            "assembly-kill",
            "kill -9 the assembly faust job, restart it",
            _kill("assembly"),
            _restart("assembly"),
        ),
        Scenario(
            "traces-kill",
            "kill -9 the traces faust job, restart it",
            _kill("traces"),
            _restart("traces"),
            traces_wait_s=150.0,
        ),
    )
}


# ---- the replicated cluster's faults ------------------------------------------------------------
def _strike_busiest_leader(sig: int) -> Step:
    """Send `sig` to the node leading the most records of the turn topics (the controller
    passed over: its loss is a fault of its own)."""

    def strike(ctx: FaultContext) -> None:
        cluster = ctx.services.kafka_cluster()
        node, led, records = busiest_leader(cluster.partitions(), avoid=cluster.controller())
        ctx.node = node
        ctx.struck.append(f"node {node}, leader of {led} partitions ({records} records)")
        cluster.signal(node, sig)

    return strike


def _kill_controller(ctx: FaultContext) -> None:
    cluster = ctx.services.kafka_cluster()
    node = cluster.controller()
    led = sum(1 for p in cluster.partitions() if p.leader == node)
    ctx.node = node
    ctx.struck.append(f"node {node}, the active controller, leader of {led} partitions")
    cluster.signal(node, signal.SIGKILL)


def _restart_struck(ctx: FaultContext) -> None:
    assert ctx.node is not None
    ctx.services.kafka_cluster().start(ctx.node)


def _resume_struck(ctx: FaultContext) -> None:
    assert ctx.node is not None
    ctx.services.kafka_cluster().signal(ctx.node, signal.SIGCONT)


def _rolling_restart(ctx: FaultContext) -> None:
    """Each node in turn: a graceful stop, a start, and every partition back in sync before
    the next (as an operator upgrading the cluster would)."""
    cluster = ctx.services.kafka_cluster()
    for node in range(1, cluster.nodes + 1):
        cluster.stop(node)
        cluster.start(node)
        took = cluster.wait_in_sync()
        ctx.struck.append(f"node {node} restarted, in sync {took:.1f} s after its start")


def _in_sync(ctx: FaultContext) -> None:
    ctx.services.kafka_cluster().wait_in_sync()


def _nothing(ctx: FaultContext) -> None:
    pass


CLUSTER_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "broker-leader-kill",
            "kill -9 the broker leading the busiest partitions, restart it",
            _strike_busiest_leader(signal.SIGKILL),
            _restart_struck,
            outage_s=5.0,
            hit_open_turns=True,
            settle=_in_sync,
            cluster=True,
        ),
        Scenario(
            "broker-pause",
            "pause the broker leading the busiest partitions (SIGSTOP) 30 s, resume it",
            _strike_busiest_leader(signal.SIGSTOP),
            _resume_struck,
            outage_s=30.0,
            hit_open_turns=True,
            settle=_in_sync,
            cluster=True,
        ),
        Scenario(
            "broker-rolling-restart",
            "a rolling restart of the three brokers (each back in sync before the next)",
            _rolling_restart,
            _nothing,
            hit_open_turns=True,
            cluster=True,
        ),
        Scenario(
            "controller-loss",
            "kill -9 the active KRaft controller, restart it",
            _kill_controller,
            _restart_struck,
            outage_s=5.0,
            hit_open_turns=True,
            settle=_in_sync,
            cluster=True,
        ),
    )
}

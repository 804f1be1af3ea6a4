"""The replicated Kafka cluster of a fault run: who leads the busiest partitions, who is the
active controller, whether every partition is back in sync, and the nodes' own faults.

The nodes are the project's (`infra/kafka/kafka.sh`, TURNSTREAM_KAFKA_REPLICATION_FACTOR=3):
node n's pid in `$TURNSTREAM_HOME/run/kafka-n.pid`, its data in `kafka/node-n`. The
controller is read from the nodes' own Raft state (`__cluster_metadata-0/quorum-state`),
not from a client's metadata: under KRaft that names a random broker, not the controller.
Blocking calls (the scenarios run in a thread); the Kafka queries run a short event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition


class ClusterError(RuntimeError):
    """The cluster is not in the state a fault needs (no node leads anything, no quorum)."""


@dataclass(frozen=True, slots=True)
class Partition:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    records: int  # its end offset: records written to it so far

    @property
    def in_sync(self) -> bool:
        return set(self.isr) == set(self.replicas)


def busiest_leader(partitions: list[Partition], avoid: int | None = None) -> tuple[int, int, int]:
    """(node, partitions it leads, their records) for the node leading the most records
    (pure); `avoid` (the controller) is passed over so that the leader's loss and the
    controller's loss are two faults, not one."""
    records: Counter[int] = Counter()
    led: Counter[int] = Counter()
    for p in partitions:
        if p.leader >= 0:
            records[p.leader] += p.records
            led[p.leader] += 1
    ranked = [n for n, _ in records.most_common() if n != avoid]
    if not ranked:
        raise ClusterError("no node leads a partition")
    node = ranked[0]
    return node, led[node], records[node]


def controller_of(states: list[dict]) -> int | None:
    """The active controller by the nodes' Raft states (pure): the leader of the highest
    epoch any of them has seen."""
    known = [s for s in states if s.get("leaderId", -1) >= 0]
    if not known:
        return None
    return max(known, key=lambda s: s.get("leaderEpoch", -1))["leaderId"]


async def _partitions(bootstrap: str, topics: list[str]) -> list[Partition]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    await consumer.start()
    try:
        found = [
            (d["topic"], p) for d in described if d["error_code"] == 0 for p in d["partitions"]
        ]
        ends = await consumer.end_offsets([TopicPartition(t, p["partition"]) for t, p in found])
    finally:
        await consumer.stop()
    return [
        Partition(
            topic=t,
            partition=p["partition"],
            leader=p["leader"],
            replicas=tuple(p["replicas"]),
            isr=tuple(p["isr"]),
            records=ends[TopicPartition(t, p["partition"])],
        )
        for t, p in found
    ]


class KafkaCluster:
    """The nodes of one run's cluster, driven through `kafka.sh` and signals."""

    def __init__(
        self,
        home: Path,
        nodes: int,
        bootstrap: str,
        topics: list[str],
        run_script: Callable[..., None],
    ) -> None:
        self.home = home
        self.nodes = nodes
        self.bootstrap = bootstrap
        self.topics = topics
        self._run = run_script  # runs an infra script with the run's environment

    # ---- what the cluster looks like -------------------------------------------------------
    def partitions(self) -> list[Partition]:
        return asyncio.run(_partitions(self.bootstrap, self.topics))

    def controller(self) -> int:
        states = []
        for node in self.running():
            path = self.home / "kafka" / f"node-{node}" / "__cluster_metadata-0" / "quorum-state"
            with contextlib.suppress(OSError, ValueError):
                states.append(json.loads(path.read_text()))
        found = controller_of(states)
        if found is None:
            raise ClusterError("no node knows a controller")
        return found

    def pid(self, node: int) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.home / "run" / f"kafka-{node}.pid").read_text())
            return pid if _alive(pid) else None
        return None

    def running(self) -> list[int]:
        return [n for n in range(1, self.nodes + 1) if self.pid(n) is not None]

    def check_replicated(self) -> None:
        """Every partition of the run's topics on every node (the topics were created with
        the cluster's replication factor, not a default of one)."""
        partitions = self.partitions()
        short = [p for p in partitions if len(p.replicas) != self.nodes]
        if not partitions or short:
            raise ClusterError(f"partitions not on all {self.nodes} nodes: {short[:3]}")

    def wait_in_sync(self, timeout_s: float = 90.0) -> float:
        """Until every partition has all its replicas in sync again; seconds it took."""
        started = time.monotonic()
        while True:
            try:
                lagging = [p for p in self.partitions() if not p.in_sync]
            except Exception:  # a node coming up answers errors for a moment
                lagging = None
            if lagging == []:
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise ClusterError(f"partitions still out of sync after {timeout_s:.0f} s")
            time.sleep(0.5)

    # ---- the faults ------------------------------------------------------------------------
    def signal(self, node: int, sig: int) -> None:
        pid = self.pid(node)
        if pid is None:
            raise ClusterError(f"node {node} is not running")
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            deadline = time.monotonic() + 30
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)

    def start(self, node: int) -> None:
        self._run("kafka/kafka.sh", "start-node", str(node))

    def stop(self, node: int) -> None:
        """A graceful stop: the node hands its leaderships over before it goes."""
        self._run("kafka/kafka.sh", "stop-node", str(node))


def _alive(pid: int) -> bool:
    """Running, and not a zombie left for its parent to reap."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        state = subprocess.run(
            ["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return True
    return bool(state) and not state.startswith("Z")

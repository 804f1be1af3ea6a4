"""Kafka and Redis of the fault suite's own, on free ports under a temporary TURNSTREAM_HOME.

Why not the shared ones: the suite stops and restarts the broker and Redis, and other people
(and CI) run their tests on the shared services at the same time. These are started with the
project's own scripts (`infra/services.sh`, `kafka.sh`, `redis.sh`), which take their ports
from TURNSTREAM_KAFKA_BOOTSTRAP / TURNSTREAM_REDIS_URL and keep all state (data, pids, logs)
under TURNSTREAM_HOME, so they touch nothing else. The Kafka jars are taken from the
developer's cache when it has them (read only), else resolved by `kafka.sh` as usual.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.faults.cluster import KafkaCluster
from bench.faults.watchdog import start_watchdog
from infra.stack import REPO
from runtime.settings import Settings
from schemas.topics import all_topics

INFRA = REPO / "infra"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_ports(count: int, rng: random.Random | None = None, taken: set[int] | None = None) -> int:
    """The first of `count` consecutive free ports on 127.0.0.1 (Kafka needs its port and
    the next for its controller; the edges take consecutive ports).

    Below the kernel's ephemeral range: a port picked from it (the OS's port 0) can be
    taken by any outgoing connection between the pick and the listener's bind (three
    brokers connecting to each other, the roles to them), and the start failed now and
    then ("edge-2 exited", `services.sh start` failing)."""
    rng = rng or random.Random()
    taken = taken if taken is not None else set()
    low, _ = ephemeral_range()
    for _ in range(500):
        first = rng.randrange(PORTS_FROM, max(PORTS_FROM + 1, low - count))
        wanted = range(first, first + count)
        if not taken.intersection(wanted) and all(_port_free(port) for port in wanted):
            taken.update(wanted)
            return first
    raise RuntimeError(f"no {count} consecutive free ports")


PORTS_FROM = 10_000


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default if unknown)."""
    try:
        low, high = path.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


CLUSTER_NODES = 3  # a replicated cluster: replication factor 3, min.insync.replicas 2


@dataclass(frozen=True, slots=True)
class Ports:
    kafka: int  # and kafka + 1, its controller (node n of a cluster: kafka + 2(n-1), + 1)
    redis: int
    edge: int  # and the next ones, one per edge
    edge_http: int  # the edges' HTTP doors: the same, from here
    clickhouse_http: int


def pick_ports(edges: int, kafka_nodes: int = 1) -> Ports:
    taken: set[int] = set()  # no two of the run's own ranges overlap
    return Ports(
        kafka=free_ports(2 * kafka_nodes, taken=taken),
        redis=free_ports(1, taken=taken),
        edge=free_ports(edges, taken=taken),
        edge_http=free_ports(edges, taken=taken),
        clickhouse_http=free_ports(1, taken=taken),
    )


class IsolatedServices:
    """Kafka, Redis (and the ClickHouse migrations) of one run; `env` is what every process
    of the run gets, so they all see these and nothing of the shared stack."""

    def __init__(
        self, home: Path, ports: Ports, base_env: dict[str, str], kafka_nodes: int = 1
    ) -> None:
        self.home = home
        self.ports = ports
        bootstrap = ",".join(f"127.0.0.1:{ports.kafka + 2 * i}" for i in range(kafka_nodes))
        self.env = {
            **base_env,
            "TURNSTREAM_HOME": str(home),
            "TURNSTREAM_KAFKA_BOOTSTRAP": bootstrap,
            "TURNSTREAM_KAFKA_REPLICATION_FACTOR": str(kafka_nodes),
            # on a cluster a send retried across a failover must not write its record twice
            "TURNSTREAM_KAFKA_IDEMPOTENT": "true" if kafka_nodes > 1 else "false",
            "TURNSTREAM_REDIS_URL": f"redis://127.0.0.1:{ports.redis}/0",
            "TURNSTREAM_EDGE_PORT": str(ports.edge),
            "TURNSTREAM_EDGE_HTTP_PORT": str(ports.edge_http),
            "TURNSTREAM_CLICKHOUSE_HTTP_PORT": str(ports.clickhouse_http),
            "TURNSTREAM_CLICKHOUSE_URL": "",
            "TURNSTREAM_NAMESPACE": "",
            "PYTHONUNBUFFERED": "1",
        }
        self.settings = Settings.from_env(self.env)
        namespace, pools = self.settings.namespace, self.settings.pool_names
        topics = [t.full_name(namespace) for t in all_topics(pools)]
        self.cluster = (
            KafkaCluster(home, kafka_nodes, bootstrap, topics, self._run)
            if kafka_nodes > 1
            else None
        )

    def _run(self, *script: str) -> None:
        log = self.home / "logs" / "services.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            done = subprocess.run(
                [str(INFRA / script[0]), *script[1:]],
                cwd=REPO,
                env=self.env,
                check=False,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if done.returncode != 0:  # the home goes with the run: say why here
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            raise RuntimeError(
                f"{' '.join(script)} exited {done.returncode}; the end of {log}:\n{tail}"
            )

    def start(self) -> None:
        self._run("services.sh", "start")
        if self.cluster is not None:
            self.cluster.check_replicated()

    def stop(self) -> None:
        self._run("services.sh", "stop")

    # ---- the faults ------------------------------------------------------------------------
    def kafka_cluster(self) -> KafkaCluster:
        if self.cluster is None:
            raise RuntimeError("this run's Kafka is one node (a cluster fault needs --cluster)")
        return self.cluster

    def stop_kafka(self) -> None:
        self._run("kafka/kafka.sh", "stop")

    def start_kafka(self) -> None:
        self._run("kafka/kafka.sh", "start")  # the same data directory: the same cluster

    def stop_redis(self) -> None:
        self._run("redis/redis.sh", "stop")

    def start_redis(self) -> None:
        self._run("redis/redis.sh", "start")  # its append-only file brings the data back


def _share_kafka_jars(home: Path, developer_home: Path) -> None:
    """Point this home's Kafka jar cache at the developer's (jars only, read only)."""
    for cached in developer_home.glob("cache/kafka-*"):
        if (cached / "libs" / ".complete").exists():
            target = home / "cache" / cached.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(cached.resolve(), target_is_directory=True)


@contextlib.contextmanager
def isolated_services(
    edges: int, extra_env: dict[str, str], *, keep_home: bool = False, kafka_nodes: int = 1
) -> Iterator[IsolatedServices]:
    """Start them under a fresh temporary home; stop them (and remove the home unless
    `keep_home`) however the block ends, and, should this process die first, have its
    watchdog do it (`bench/faults/watchdog.py`)."""
    developer = Settings.from_env()
    home = Path(tempfile.mkdtemp(prefix="turnstream-faults-"))
    lifeline = start_watchdog(home, keep_home=keep_home)
    _share_kafka_jars(home, developer.state_path)
    # nothing of the developer's own configuration leaks in: the run sets what it needs
    base = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    services = IsolatedServices(
        home, pick_ports(edges, kafka_nodes), {**base, **extra_env}, kafka_nodes
    )
    try:
        services.start()
        yield services
    finally:
        with contextlib.suppress(Exception):
            services.stop()
        if not keep_home:
            shutil.rmtree(home, ignore_errors=True)
        os.close(lifeline)  # the watchdog finds nothing left and ends

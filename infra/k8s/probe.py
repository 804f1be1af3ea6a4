"""Exec probes for the roles that serve no HTTP (Kubernetes probes and compose healthchecks).

Only the edge answers HTTP (its web client's files, on the WebSocket port). The consumer
roles expose nothing, so these checks read what a running role leaves behind:

- `board` (inference workers): this pod's entry on its pool's state board in Redis
  (`schemas.worker_state`), which the worker rewrites every
  TURNSTREAM_WORKER_STATE_INTERVAL_MS from a core task once the engine is loaded and its
  Kafka clients run, and takes off when it drains. Ready: an entry of this host fresher
  than TURNSTREAM_WORKER_STATE_TTL_MS that owns a partition (what the router needs to send
  it turns). `--liveness`: fails only on positive evidence of a hang: Redis answers and
  no entry of this host is younger than `--max-age-s` (a blocked event loop stops the
  writes); an unreachable Redis passes, since restarting GPU workers cannot fix Redis.
- `kafka` (every other consumer role): an ESTABLISHED TCP connection to a port of
  TURNSTREAM_KAFKA_BOOTSTRAP exists in this pod's network namespace. The roles load their
  models before they start their Kafka clients, so this says "started", not "healthy":
  the faust jobs connect before their tables are recovered, and a hung process keeps its
  sockets (no liveness probe is derived from it). See docs/deploy.md, "Probes".
- `redis` (the safety worker, which has no Kafka client: it pops its windows from a Redis
  list): the same, to the port of TURNSTREAM_REDIS_URL, connected once its models loaded.

Exit status 0 = pass, 1 = fail; one line on stdout says why (kubectl describe shows it).
`python infra/k8s/probe.py board|kafka|redis [--liveness] [--max-age-s S]`
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

ESTABLISHED = "01"  # the state column of /proc/net/tcp{,6}
TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def bootstrap_ports(bootstrap: str) -> set[int]:
    """The ports named in a Kafka bootstrap list (`host:port,host:port`)."""
    ports = set()
    for server in bootstrap.split(","):
        _, sep, port = server.strip().rpartition(":")
        if sep and port.isdigit():
            ports.add(int(port))
    return ports


def established_remote_ports(table: str) -> set[int]:
    """Remote ports of the ESTABLISHED connections in one /proc/net/tcp{,6} table."""
    ports = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != ESTABLISHED:
            continue
        _, _, port_hex = fields[2].rpartition(":")
        try:
            ports.add(int(port_hex, 16))
        except ValueError:
            continue
    return ports


def redis_port(url: str) -> set[int]:
    """The port of a Redis URL (`redis://[user:pass@]host[:port][/db]`; 6379 by default)."""
    hostport = url.split("//", 1)[-1].split("/", 1)[0].rpartition("@")[2]
    if not hostport:
        return set()
    _, sep, port = hostport.rpartition(":")
    if not sep:
        return {6379}
    return {int(port)} if port.isdigit() else set()


def connected(what: str, wanted: set[int], tables: Iterable[str], setting: str) -> tuple[bool, str]:
    if not wanted:
        return False, f"no port in {setting}"
    seen = set().union(*(established_remote_ports(t) for t in tables))
    if wanted & seen:
        return True, f"connected to {what} (port {sorted(wanted & seen)})"
    return False, f"no established connection to {what} port {sorted(wanted)} yet"


def kafka_connected(bootstrap: str, tables: Iterable[str]) -> tuple[bool, str]:
    setting = f"TURNSTREAM_KAFKA_BOOTSTRAP={bootstrap!r}"
    return connected("Kafka", bootstrap_ports(bootstrap), tables, setting)


def redis_connected(url: str, tables: Iterable[str]) -> tuple[bool, str]:
    return connected("Redis", redis_port(url), tables, "TURNSTREAM_REDIS_URL")


def own_entries(
    board: Mapping[bytes, bytes], worker_id: str, hostname: str, role: str = "inference"
) -> list:
    """This pod's entries on a pool's board: the configured worker id, or the ids
    `runtime.instance_id.make_instance_id` makes here (`<role>-<hostname>-<pid>-<random>`)."""
    from schemas.worker_state import decode_state

    prefix = f"{role}-{hostname}-"
    states = []
    for field, value in board.items():
        name = field.decode() if isinstance(field, bytes) else str(field)
        if name != worker_id and not (not worker_id and name.startswith(prefix)):
            continue
        try:
            states.append(decode_state(value))
        except Exception:  # another version's or a half-written entry: not ours to judge
            continue
    return states


def board_ready(states: list, now_ms: float, ttl_ms: float) -> tuple[bool, str]:
    from schemas.worker_state import fresh

    live = fresh(states, now_ms, ttl_ms)
    if live:
        newest = max(live, key=lambda s: s.at_ms)
        return True, f"{newest.worker_id} on the board, partitions {newest.partitions}"
    if states:
        newest = max(states, key=lambda s: s.at_ms)
        age_s = (now_ms - newest.at_ms) / 1000
        return False, f"entry {age_s:.1f} s old or without partitions {newest.partitions}"
    return False, "no entry of this pod on the board (engine loading, or not started)"


def board_alive(states: list, now_ms: float, max_age_s: float) -> tuple[bool, str]:
    if not states:
        return False, "no entry of this pod on the board"
    age_s = (now_ms - max(s.at_ms for s in states)) / 1000
    if age_s > max_age_s:
        return False, f"newest entry is {age_s:.0f} s old: the worker stopped writing"
    return True, f"entry {age_s:.1f} s old"


def check_board(liveness: bool, max_age_s: float) -> tuple[bool, str]:
    import redis

    from runtime.settings import Settings
    from schemas.channels import RedisNames

    settings = Settings.from_env()
    if settings.worker_state_interval_ms <= 0:
        return True, "state board off (TURNSTREAM_WORKER_STATE_INTERVAL_MS=0): cannot tell"
    key = RedisNames.for_namespace(settings.namespace).worker_states_key(settings.pool)
    try:
        client = redis.Redis.from_url(
            settings.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0
        )
        board = client.hgetall(key)
    except (redis.RedisError, OSError) as err:
        if liveness:
            return True, f"Redis unreachable ({err!r}): not this worker's fault"
        return False, f"Redis unreachable: {err!r}"
    states = own_entries(board, settings.worker_id, socket.gethostname())
    now_ms = time.time() * 1000
    if liveness:
        return board_alive(states, now_ms, max_age_s)
    return board_ready(states, now_ms, settings.worker_state_ttl_ms)


def check_connected(check: str) -> tuple[bool, str]:
    from runtime.settings import Settings

    settings = Settings.from_env()
    tables = [p.read_text() for p in TCP_TABLES if p.exists()]
    if check == "redis":
        return redis_connected(settings.redis_url, tables)
    return kafka_connected(settings.kafka_bootstrap, tables)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=["board", "kafka", "redis"])
    parser.add_argument("--liveness", action="store_true", help="board: fail only on a hang")
    parser.add_argument("--max-age-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.check == "board":
        ok, why = check_board(args.liveness, args.max_age_s)
    else:
        ok, why = check_connected(args.check)
    print(("ok: " if ok else "fail: ") + why)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

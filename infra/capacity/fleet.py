"""The non-GPU fleet at peak from the measured per-turn costs: processes of every CPU role
(edges, workers, faust jobs, the sink, the Python around each engine), Kafka brokers and Redis
shards. Pure arithmetic; `costs.PlatformCosts` says what a turn costs each role.

A role's processes run at most `role_cpu_utilisation` of a core each, of which its idle share
is spent whatever the load, so

    processes = ⌈ qps × ms ÷ 1000 ÷ (utilisation − idle share) ⌉,  at least the floor,

and a role's cores are its work plus its processes' idle. Brokers: the broker's CPU per turn
(measured with replication factor 1) × the production replication factor, spread over
`broker_cores` at `broker_cpu_utilisation`, and at least what the bytes (replicated) and the
partition replicas need. Redis: its CPU per turn on one core per shard, and at least the
command rate a shard holds.
"""

# ruff: noqa: RUF002, RUF003  (× ÷ − ⌈⌉ are the arithmetic this module documents)
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from infra.capacity.costs import FleetParameters, PlatformCosts


@dataclass(frozen=True)
class RoleFleet:
    name: str
    cpu_ms_per_turn: float
    cores_peak: float  # work + the processes' idle
    processes: int
    bound: str  # cpu | floor | connections | tokens


@dataclass(frozen=True)
class BrokerFleet:
    records_per_s: float  # written, before replication
    mb_per_s: float  # written × replication factor
    cores: float  # replication included
    partition_replicas: int
    by_cpu: int
    by_bytes: int
    by_partitions: int
    brokers: int
    bound: str


@dataclass(frozen=True)
class RedisFleet:
    commands_per_s: float
    cores: float
    by_cpu: int
    by_commands: int
    shards: int
    instances: int  # shards × (1 + replicas)


@dataclass(frozen=True)
class Fleet:
    roles: tuple[RoleFleet, ...]
    brokers: BrokerFleet
    redis: RedisFleet
    cores_total: float  # every role, the brokers and Redis at peak
    cpu_ms_per_turn_total: float
    records_per_turn: float
    source: str

    def role(self, name: str) -> RoleFleet:
        return next(r for r in self.roles if r.name == name)


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - 1e-9))


def role_fleet(
    name: str,
    work_cores: float,
    idle_share: float,
    params: FleetParameters,
    *,
    at_least: Mapping[str, int] | None = None,
    cpu_ms_per_turn: float = 0.0,
) -> RoleFleet:
    """One role's processes for `work_cores` of work; `at_least` holds other bounds by name
    (an edge's connections and tokens), the largest of which wins. `cpu_ms_per_turn` is
    carried for the report."""
    usable = params.role_cpu_utilisation - idle_share
    if usable <= 0:
        raise ValueError(
            f"{name}: its idle share {idle_share:.0%} leaves no room under the "
            f"{params.role_cpu_utilisation:.0%} target"
        )
    bounds = {"cpu": _ceil(work_cores / usable), "floor": params.min_processes_per_role}
    bounds.update(at_least or {})
    bound = max(bounds, key=lambda k: (bounds[k], k == "cpu"))
    processes = bounds[bound]
    return RoleFleet(
        name=name,
        cpu_ms_per_turn=cpu_ms_per_turn,
        cores_peak=work_cores + processes * idle_share,
        processes=processes,
        bound=bound,
    )


def broker_fleet(
    qps: float,
    costs: PlatformCosts,
    params: FleetParameters,
    *,
    mb_per_s: float,
    partitions: int,
) -> BrokerFleet:
    """Brokers for `qps` turns/s writing `mb_per_s` (before replication) over `partitions`."""
    rf = params.replication_factor
    idle = costs.idle_core_share.get("broker", 0.0)
    cores = qps * costs.cpu_ms_per_turn.get("broker", 0.0) / 1000 * rf
    per_broker = params.broker_cores * params.broker_cpu_utilisation - idle
    bounds = {
        "cpu": _ceil(cores / per_broker),
        "bytes": _ceil(mb_per_s * rf / params.broker_mb_per_s),
        "partitions": _ceil(partitions * rf / params.broker_partitions),
        "floor": params.min_brokers,
    }
    bound = max(bounds, key=lambda k: (bounds[k], k != "floor"))
    return BrokerFleet(
        records_per_s=qps * costs.records_per_turn_total,
        mb_per_s=mb_per_s * rf,
        cores=cores + bounds[bound] * idle,
        partition_replicas=partitions * rf,
        by_cpu=bounds["cpu"],
        by_bytes=bounds["bytes"],
        by_partitions=bounds["partitions"],
        brokers=bounds[bound],
        bound=bound,
    )


def redis_fleet(qps: float, costs: PlatformCosts, params: FleetParameters) -> RedisFleet:
    """Redis shards: one core each (commands run on one thread), by CPU and by commands."""
    cores = qps * costs.cpu_ms_per_turn.get("redis", 0.0) / 1000
    commands = qps * costs.redis_commands_per_turn
    usable = params.redis_cpu_utilisation - costs.idle_core_share.get("redis", 0.0)
    by_cpu = max(1, _ceil(cores / usable))
    by_commands = max(1, _ceil(commands / params.redis_commands_per_s_per_shard))
    shards = max(by_cpu, by_commands)
    return RedisFleet(
        commands_per_s=commands,
        cores=cores + shards * costs.idle_core_share.get("redis", 0.0),
        by_cpu=by_cpu,
        by_commands=by_commands,
        shards=shards,
        instances=shards * (1 + params.redis_replicas_per_shard),
    )


def size_roles(
    qps: float,
    costs: PlatformCosts,
    params: FleetParameters,
    *,
    extra_cores: Mapping[str, float] | None = None,
    at_least: Mapping[str, Mapping[str, int]] | None = None,
) -> tuple[RoleFleet, ...]:
    """Every CPU role (not the brokers or Redis) at `qps` turns/s. `extra_cores` adds work a
    role does beyond the measured turn (speech for voice turns); `at_least` adds bounds per
    role."""
    extra_cores = extra_cores or {}
    at_least = at_least or {}
    return tuple(
        role_fleet(
            name,
            qps * ms / 1000 + extra_cores.get(name, 0.0),
            costs.idle_core_share.get(name, 0.0),
            params,
            at_least=at_least.get(name),
            cpu_ms_per_turn=ms,
        )
        for name, ms in costs.cpu_ms_per_turn.items()
        if name not in ("broker", "redis")
    )


def size_fleet(
    qps: float,
    costs: PlatformCosts,
    params: FleetParameters,
    *,
    roles: tuple[RoleFleet, ...] | None = None,
    mb_per_s: float,
    partitions: int,
) -> Fleet:
    """The whole non-GPU fleet at `qps` turns/s: `roles` as `size_roles` sized them (by
    default with no extra work or bounds), the brokers for `mb_per_s` over `partitions`, and
    Redis."""
    roles = roles if roles is not None else size_roles(qps, costs, params)
    brokers = broker_fleet(qps, costs, params, mb_per_s=mb_per_s, partitions=partitions)
    redis = redis_fleet(qps, costs, params)
    return Fleet(
        roles=roles,
        brokers=brokers,
        redis=redis,
        cores_total=sum(r.cores_peak for r in roles) + brokers.cores + redis.cores,
        cpu_ms_per_turn_total=sum(costs.cpu_ms_per_turn.values()),
        records_per_turn=costs.records_per_turn_total,
        source=costs.source,
    )

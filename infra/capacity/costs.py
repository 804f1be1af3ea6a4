"""What one turn costs the platform around the GPUs, as the cost benchmark measured it.

`python -m bench.cost` writes `bench/results/cost-<engine>.json`: per concurrency level, the CPU
milliseconds per turn of every process of the stack (gross and above the idle rate), Kafka
records and bytes per turn per topic and Redis commands per turn, plus each process's idle CPU.
The planner reads one level of one side of that file (`parse_cost_bench`) and models a process
kind's cores at a load of `qps` turns/s as

    cores = qps × marginal CPU ms per turn ÷ 1000 + processes × idle share of a core

where the marginal figure is the benchmark's *above idle* one: the gross figure of a 2-core box
folds the idle polling of every process into each turn, which a fleet pays per process instead.
The default level is the busiest one measured (most turns/s): fleet processes run at many
turns/s each, so their batching is at least the busiest level's.

`DEFAULT_COSTS` is one such reading, embedded so the planner runs without a results file
(results are not kept in git); its command and date are in `source`.
"""

# ruff: noqa: RUF002, RUF003  (× ÷ are the arithmetic this module documents)
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.errors import InfraError

# bench.cost's process names → the planner's roles
PROCESS_ROLES: Mapping[str, str] = {
    "edge": "edge",
    "preprocess worker": "preprocess",
    "safety worker": "safety",
    "tts worker": "tts",
    "assembly job": "assembly",
    "traces job": "traces",
    "clickhouse sink": "sink",
    "audit worker": "audit",
    "inference worker": "inference",
    "kafka": "broker",
    "redis": "redis",
}

# Roles a results file may lack: measured before the role joined the local stack.
OPTIONAL_PROCESSES = frozenset({"audit worker"})


class CostFileError(InfraError, ValueError):
    """A cost-benchmark results file the planner cannot read."""


@dataclass(frozen=True)
class PlatformCosts:
    """Per-turn costs of the non-GPU platform, by role (names of `PROCESS_ROLES`' values)."""

    cpu_ms_per_turn: Mapping[str, float]  # marginal (above idle), ≥ 0
    idle_core_share: Mapping[str, float]  # of one core, per process, with no traffic
    records_per_turn: Mapping[str, float]  # per topic, changelogs included
    bytes_per_turn: Mapping[str, float]  # per topic
    redis_commands_per_turn: float
    answer_tokens: float  # the benchmark's answer length (per-token work scales with it)
    turns_per_s: float  # what the level ran at
    source: str = "assumed"

    @property
    def records_per_turn_total(self) -> float:
        return sum(self.records_per_turn.values())

    @property
    def bytes_per_turn_total(self) -> float:
        return sum(self.bytes_per_turn.values())


def _default_costs() -> PlatformCosts:
    return PlatformCosts(
        cpu_ms_per_turn={
            "edge": 3.57,
            "preprocess": 2.34,
            "safety": 4.59,
            "tts": 0.28,
            "assembly": 3.89,
            "traces": 2.29,
            "sink": 3.74,
            "audit": 0.46,
            "inference": 4.96,
            "broker": 3.71,
            "redis": 1.57,
        },
        idle_core_share={
            "edge": 0.0,
            "preprocess": 0.027,
            "safety": 0.0,
            "tts": 0.015,
            "assembly": 0.056,
            "traces": 0.022,
            "sink": 0.03,
            "audit": 0.016,
            "inference": 0.006,
            "broker": 0.043,
            "redis": 0.003,
        },
        records_per_turn={
            "assembly-conversations-changelog": 2.0,
            "inference.chat": 1.0,
            "traces": 1.0,
            "traces.ticks": 0.02,
            "turns.completed": 1.0,
            "turns.enriched": 1.0,
            "turns.submitted": 1.0,
            "workers.metrics": 0.04,
        },
        bytes_per_turn={
            "assembly-conversations-changelog": 10534,
            "inference.chat": 4192,
            "traces": 2533,
            "traces.ticks": 0,
            "turns.completed": 2359,
            "turns.enriched": 1554,
            "turns.submitted": 745,
            "workers.metrics": 17,
        },
        redis_commands_per_turn=216.7,
        answer_tokens=32,
        turns_per_s=45.8,
        source=(
            "bench.cost 2026-12-05 22:26, main at 7bff28d (safety windows over a Redis list), "
            "fake engine, 2 cores, 64 conversations (`python -m bench.cost --baseline f3a46b1 "
            "--concurrency 16,64 --seconds 6 --repeats 3 --idle-s 5`)"
        ),
    )


DEFAULT_COSTS: PlatformCosts = _default_costs()


def _medians(entry: Any, where: str) -> dict[str, float]:
    if not isinstance(entry, dict):
        raise CostFileError(f"{where}: expected an object of {{median, low, high}}")
    out = {}
    for key, spread in entry.items():
        value = spread.get("median") if isinstance(spread, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CostFileError(f"{where}: {key} has no numeric median")
        out[str(key)] = float(value)
    return out


def _roles(
    per_process: Mapping[str, float], where: str, *, required: bool = True
) -> dict[str, float]:
    unknown = sorted(set(per_process) - set(PROCESS_ROLES) - {"total"})
    if unknown:
        raise CostFileError(f"{where}: unknown process(es) {', '.join(unknown)}")
    missing = sorted(set(PROCESS_ROLES) - set(per_process) - OPTIONAL_PROCESSES)
    if missing and required:
        raise CostFileError(f"{where}: no figure for {', '.join(missing)}")
    return {PROCESS_ROLES[k]: v for k, v in per_process.items() if k in PROCESS_ROLES}


def parse_cost_bench(
    data: Any, level: int | None = None, side: int = -1, source: str = "bench.cost"
) -> PlatformCosts:
    """One level (default: the busiest) of one side (default: the last, "this tree") of a
    `bench.cost` results document."""
    if not isinstance(data, dict) or not isinstance(data.get("sides"), list) or not data["sides"]:
        raise CostFileError(f"{source}: not a bench.cost results file (no sides)")
    try:
        chosen = data["sides"][side]
    except IndexError:
        raise CostFileError(f"{source}: no side {side}") from None
    levels = chosen.get("levels") if isinstance(chosen, dict) else None
    if not isinstance(levels, dict) or not levels:
        raise CostFileError(f"{source}: side {side} has no levels")
    if level is None:
        key = max(levels, key=lambda k: levels[k].get("turns_per_s", {}).get("median", 0))
    elif str(level) in levels:
        key = str(level)
    else:
        raise CostFileError(f"{source}: no level {level} (has {', '.join(sorted(levels))})")
    lv = levels[key]
    where = f"{source}: level {key}"
    for needed in ("cpu_ms_per_turn_above_idle", "records_per_turn", "bytes_per_turn"):
        if needed not in lv:
            raise CostFileError(f"{where}: no {needed}")
    cpu = _roles(_medians(lv["cpu_ms_per_turn_above_idle"], where), where)
    idle = _roles(dict(chosen.get("idle_cpu_percent", {})), where, required=False)
    redis = lv.get("redis_calls_per_turn_total", {}).get("median", 0.0)
    tps = lv.get("turns_per_s", {}).get("median", 0.0)
    label = chosen.get("label", "")
    return PlatformCosts(
        cpu_ms_per_turn={k: max(0.0, v) for k, v in cpu.items()},
        idle_core_share={k: max(0.0, v) / 100 for k, v in idle.items()},
        records_per_turn=_medians(lv["records_per_turn"], where),
        bytes_per_turn=_medians(lv["bytes_per_turn"], where),
        redis_commands_per_turn=float(redis),
        answer_tokens=float(data.get("max_tokens") or 0),
        turns_per_s=float(tps),
        source=(
            f"{source} {data.get('date', '?')}, {data.get('engine', '?')} engine, "
            f"{label or 'side ' + str(side)}, {key} conversations"
        ),
    )


def load_cost_bench(path: Path, level: int | None = None) -> PlatformCosts:
    """Read a `bench.cost` results file; errors name the file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CostFileError(f"{path}: {exc}") from exc
    return parse_cost_bench(data, level, source=Path(path).name)


@dataclass(frozen=True)
class FleetParameters:
    """What one machine of each non-GPU kind holds (assumed; named so a reader can change
    them): one Python process per core, brokers and Redis shards as their own machines."""

    role_cpu_utilisation: float = 0.6  # a Python process kept below saturation
    min_processes_per_role: int = 2  # one failure must not stop a role
    broker_cores: int = 16
    broker_cpu_utilisation: float = 0.5  # headroom for a broker's failure and rebalances
    broker_mb_per_s: float = 200.0  # produce + replication + consume, disk and NIC
    broker_partitions: int = 4_000  # partition replicas one broker leads or follows
    replication_factor: int = 3  # the local stack runs 1: production triples broker work
    min_brokers: int = 3
    redis_cpu_utilisation: float = 0.5  # one core per shard (Redis runs commands on one)
    redis_replicas_per_shard: int = 1
    redis_commands_per_s_per_shard: float = 100_000.0  # a ceiling beside the CPU measured

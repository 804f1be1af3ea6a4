"""The fleet around the GPUs (`infra.capacity.costs` + `fleet`): a `bench.cost` results file
read into per-turn costs, and those costs turned into processes, brokers and Redis shards.
Pure arithmetic: no services."""

# ruff: noqa: RUF003  (× ÷ are the arithmetic under test)
from __future__ import annotations

import io
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from infra.capacity.cli import main
from infra.capacity.costs import (
    DEFAULT_COSTS,
    CostFileError,
    FleetParameters,
    parse_cost_bench,
)
from infra.capacity.fleet import broker_fleet, redis_fleet, role_fleet, size_fleet
from infra.capacity.model import Inputs, Workload, plan


def spread(x: float) -> dict[str, float]:
    return {"median": x, "low": x * 0.9, "high": x * 1.1}


def level(turns_per_s: float, scale: float) -> dict:
    """One level as bench.cost's `summarise` writes it."""
    cpu = {
        "edge": 3.0,
        "preprocess worker": 1.0,
        "safety worker": 2.0,
        "tts worker": -0.02,  # above idle can come out below zero: noise
        "assembly job": 5.0,
        "traces job": 5.0,
        "clickhouse sink": 5.0,
        "inference worker": 4.0,
        "kafka": 4.0,
        "redis": 1.0,
    }
    return {
        "turns": 100,
        "errors": 0,
        "turns_per_s": spread(turns_per_s),
        "cpu_ms_per_turn": {k: spread(v * scale * 1.5) for k, v in cpu.items()},
        "cpu_ms_per_turn_above_idle": {k: spread(v * scale) for k, v in cpu.items()},
        "records_per_turn": {"turns.submitted": spread(1.0), "traces-pending-changelog": spread(4)},
        "bytes_per_turn": {
            "turns.submitted": spread(600),
            "traces-pending-changelog": spread(2800),
        },
        "redis_calls_per_turn_total": spread(300 * scale),
    }


def cost_doc() -> dict:
    side = {
        "label": "this tree (abc1234)",
        "levels": {"1": level(1.3, 5.0), "16": level(18.0, 1.5), "64": level(45.0, 1.0)},
        "idle_cpu_percent": {"edge": 0.0, "clickhouse sink": 6.0, "kafka": 8.0, "total": 14},
    }
    return {"date": "2026-12-02 01:00", "engine": "fake", "max_tokens": 32, "sides": [side]}


# --- reading bench.cost ----------------------------------------------------------------------


def test_the_busiest_level_is_read_above_idle_with_roles_renamed() -> None:
    c = parse_cost_bench(cost_doc())
    assert c.turns_per_s == 45.0
    assert c.cpu_ms_per_turn["sink"] == 5.0 and c.cpu_ms_per_turn["broker"] == 4.0
    assert c.cpu_ms_per_turn["tts"] == 0.0  # clipped
    # the made-up file predates the audit worker (an optional process)
    assert set(c.cpu_ms_per_turn) == set(DEFAULT_COSTS.cpu_ms_per_turn) - {"audit"}
    assert c.idle_core_share == {"edge": 0.0, "sink": 0.06, "broker": 0.08}
    assert c.records_per_turn_total == 5.0
    assert c.bytes_per_turn_total == 600 + 2800
    assert c.redis_commands_per_turn == 300
    assert c.answer_tokens == 32
    assert "64 conversations" in c.source and "this tree" in c.source


def test_a_level_can_be_chosen_and_bad_files_are_refused() -> None:
    assert parse_cost_bench(cost_doc(), level=16).cpu_ms_per_turn["sink"] == pytest.approx(7.5)
    with pytest.raises(CostFileError, match="no level 8"):
        parse_cost_bench(cost_doc(), level=8)
    with pytest.raises(CostFileError, match=r"not a bench\.cost"):
        parse_cost_bench({"chat": {"tokens_per_s_per_gpu": 1}})
    doc = cost_doc()
    doc["sides"][0]["levels"]["64"]["cpu_ms_per_turn_above_idle"]["gpu fairy"] = spread(1)
    with pytest.raises(CostFileError, match="unknown process"):
        parse_cost_bench(doc)
    doc = cost_doc()
    del doc["sides"][0]["levels"]["64"]["cpu_ms_per_turn_above_idle"]["redis"]
    with pytest.raises(CostFileError, match="no figure for redis"):
        parse_cost_bench(doc)
    doc = cost_doc()
    del doc["sides"][0]["levels"]["64"]["bytes_per_turn"]
    with pytest.raises(CostFileError, match="no bytes_per_turn"):
        parse_cost_bench(doc)


def test_the_embedded_reading_names_every_role_and_its_command() -> None:
    roles = {"edge", "preprocess", "safety", "tts", "assembly", "traces", "sink", "inference"}
    assert set(DEFAULT_COSTS.cpu_ms_per_turn) == roles | {"audit", "broker", "redis"}
    assert "python -m bench.cost" in DEFAULT_COSTS.source
    assert DEFAULT_COSTS.records_per_turn_total == pytest.approx(7.06)


# --- sizing ----------------------------------------------------------------------------------


def test_a_role_is_sized_by_its_work_over_the_room_its_idle_leaves() -> None:
    p = FleetParameters(role_cpu_utilisation=0.6, min_processes_per_role=2)
    r = role_fleet("sink", work_cores=10.0, idle_share=0.1, params=p)
    assert r.processes == math.ceil(10 / 0.5) == 20
    assert r.cores_peak == pytest.approx(10 + 20 * 0.1)
    assert r.bound == "cpu"
    assert role_fleet("tts", 0.0, 0.0, p).processes == 2  # the floor
    edge = role_fleet("edge", 1.0, 0.0, p, at_least={"tokens": 40, "connections": 7})
    assert (edge.processes, edge.bound) == (40, "tokens")
    with pytest.raises(ValueError, match="no room"):
        role_fleet("sink", 1.0, 0.7, p)


def test_brokers_pay_for_replication_and_take_the_largest_bound() -> None:
    c = replace(DEFAULT_COSTS, cpu_ms_per_turn={"broker": 5.0}, idle_core_share={})
    one = broker_fleet(
        10_000, c, FleetParameters(replication_factor=1), mb_per_s=100, partitions=100
    )
    three = broker_fleet(
        10_000, c, FleetParameters(replication_factor=3), mb_per_s=100, partitions=100
    )
    assert one.cores == pytest.approx(50.0) and three.cores == pytest.approx(150.0)
    assert (one.by_cpu, three.by_cpu) == (math.ceil(50 / 8), math.ceil(150 / 8))
    assert three.mb_per_s == 300 and three.partition_replicas == 300
    assert three.brokers == max(three.by_cpu, three.by_bytes, three.by_partitions, 3)
    small = broker_fleet(1, c, FleetParameters(), mb_per_s=0.1, partitions=10)
    assert (small.brokers, small.bound) == (3, "floor")
    wide = broker_fleet(1, c, FleetParameters(), mb_per_s=0.1, partitions=40_000)
    assert (wide.brokers, wide.bound) == (30, "partitions")


def test_redis_shards_follow_cpu_or_commands_whichever_needs_more() -> None:
    c = replace(DEFAULT_COSTS, cpu_ms_per_turn={"redis": 1.0}, idle_core_share={})
    p = FleetParameters(redis_cpu_utilisation=0.5, redis_commands_per_s_per_shard=100_000)
    cpu_bound = redis_fleet(10_000, replace(c, redis_commands_per_turn=10), p)
    assert (cpu_bound.by_cpu, cpu_bound.shards, cpu_bound.instances) == (20, 20, 40)
    chatty = redis_fleet(10_000, replace(c, redis_commands_per_turn=1_000), p)
    assert chatty.by_commands == 100 and chatty.shards == 100


def test_the_fleet_grows_with_load_and_shrinks_with_cheaper_turns() -> None:
    costs = DEFAULT_COSTS
    p = FleetParameters()
    small = size_fleet(1_000, costs, p, mb_per_s=10, partitions=100)
    big = size_fleet(10_000, costs, p, mb_per_s=100, partitions=1_000)
    cheap_costs = replace(
        costs, cpu_ms_per_turn={k: v / 2 for k, v in costs.cpu_ms_per_turn.items()}
    )
    cheap = size_fleet(10_000, cheap_costs, p, mb_per_s=100, partitions=1_000)
    for name in ("sink", "assembly", "traces"):
        assert small.role(name).processes < big.role(name).processes
        assert cheap.role(name).processes < big.role(name).processes
    assert cheap.cores_total < big.cores_total
    assert big.cpu_ms_per_turn_total == pytest.approx(sum(costs.cpu_ms_per_turn.values()))


def test_the_plan_sizes_the_fleet_from_the_costs_it_is_given() -> None:
    base = Inputs()
    half = replace(
        DEFAULT_COSTS, cpu_ms_per_turn={k: v / 2 for k, v in DEFAULT_COSTS.cpu_ms_per_turn.items()}
    )
    cheaper = plan(replace(base, platform=replace(base.platform, costs=half)))
    today = plan(base)
    assert cheaper.fleet.cores_total < today.fleet.cores_total
    assert cheaper.fleet.role("sink").processes < today.fleet.role("sink").processes
    # 100× the users: 100× the turns/s, and the roles follow
    hundred = plan(replace(base, workload=replace(Workload(), dau=1e8)))
    assert hundred.load.peak_qps == pytest.approx(100 * today.load.peak_qps)
    sink = hundred.fleet.role("sink")
    assert sink.processes == math.ceil(
        hundred.load.peak_qps
        * DEFAULT_COSTS.cpu_ms_per_turn["sink"]
        / 1000
        / (0.6 - DEFAULT_COSTS.idle_core_share["sink"])
    )
    assert hundred.fleet.brokers.brokers > today.fleet.brokers.brokers
    assert hundred.fleet.redis.shards > today.fleet.redis.shards


def test_the_command_line_reads_a_cost_file(tmp_path: Path) -> None:
    path = tmp_path / "cost-fake.json"
    path.write_text(json.dumps(cost_doc()))
    out = io.StringIO()
    assert main(["--from-cost", str(path)], out=out) == 0
    text = out.getvalue()
    assert "Fleet around the GPUs" in text and "cost-fake.json" in text
    assert "kafka brokers (RF 3)" in text and "redis shards" in text
    out = io.StringIO()
    assert main(["--from-cost", str(path), "--json"], out=out) == 0
    fleet = json.loads(out.getvalue())["fleet"]
    sink = next(r for r in fleet["roles"] if r["name"] == "sink")
    assert sink["cpu_ms_per_turn"] == 5.0  # the file's, not the embedded 4.85
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["--from-cost", str(bad)], out=io.StringIO()) == 2
    assert main(["--from-cost", str(path), "--cost-level", "3"], out=io.StringIO()) == 2

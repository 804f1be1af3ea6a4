"""The capacity planner (`infra.capacity`): the seed's worked example reproduced from the
defaults, the directions that must hold (more users → more GPUs, faster GPUs → fewer,
autoscaling never dearer than static, a partition for every consumer), measured rows turned
into per-GPU rates, and the command line. Pure arithmetic: no services."""

# ruff: noqa: RUF002, RUF003  (× ÷ are the arithmetic under test)
from __future__ import annotations

import io
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.capacity.cli import main
from infra.capacity.measured import (
    METRICS_COLUMNS,
    TRACES_COLUMNS,
    MeasurementError,
    PoolMeasurement,
    apply,
    metrics_sql,
    parse_bench,
    pool_measurements,
    traces_sql,
)
from infra.capacity.model import (
    CONSUMER_DIURNAL,
    Autoscaling,
    Hardware,
    Inputs,
    PoolMix,
    Workload,
    active_hours_curve,
    friendly_count,
    plan,
    seed_estimate,
)
from infra.capacity.seed import SEED_FIGURES, figures, reconstruct


def with_workload(**kw: object) -> Inputs:
    return replace(Inputs(), workload=replace(Workload(), **kw))


def scaled_hardware(factor: float) -> Hardware:
    """Every pool's per-GPU rates and sequences × `factor`."""
    hw = Hardware()
    pools = {
        name: replace(
            p,
            prefill_tokens_per_s_per_gpu=p.prefill_tokens_per_s_per_gpu * factor,
            decode_tokens_per_s_per_gpu=p.decode_tokens_per_s_per_gpu * factor,
            max_seqs_per_gpu=p.max_seqs_per_gpu * factor,
        )
        for name, p in hw.pools.items()
    }
    return replace(hw, pools=pools)


# --- the seed's example -----------------------------------------------------------------------


def test_the_seed_example_comes_out_of_the_defaults() -> None:
    s = seed_estimate(Workload(), Hardware())
    assert s.requests_per_day == 15_000_000  # 1M × 3 sessions × 5 rounds
    assert s.avg_qps == pytest.approx(15e6 / (8 * 3_600))  # 8 active hours
    assert s.peak_qps == pytest.approx(1_562.5)  # × 3
    assert s.tokens_per_s_avg == pytest.approx(1_302_083.3, abs=0.1)
    assert s.gpus_avg == pytest.approx(325.52, abs=0.01)
    assert s.gpus_peak == pytest.approx(976.56, abs=0.01)
    assert s.cost_month_static_usd == 977 * 3.0 * 720


def test_every_figure_of_the_worked_example_is_the_seeds() -> None:
    r = reconstruct()
    assert r.gpus_peak_rounded == 1_000
    assert r.cost_month_static_usd == 2_160_000  # 1,000 × $3 × 24 × 30
    assert r.cost_month_autoscaled_usd == (
        (326 * 8 + 50 * 16) * 30 * 3.0,
        (326 * 8 + 100 * 16) * 30 * 3.0,
    )
    shown = figures(r)
    assert len(shown) == 11
    assert [f.name for f in shown if not f.matches] == []
    # and the check can fail: other inputs are not the seed's example
    other = figures(reconstruct(replace(Workload(), active_hours_per_day=24)))
    assert {f.name for f in other if not f.matches} >= {"QPS average", "$/month static"}
    dearer = figures(reconstruct(hardware=replace(Hardware(), seed_gpu_usd_per_hour=2.0)))
    assert "$/month static" in {f.name for f in dearer if not f.matches}


def test_the_seeds_day_is_flat_over_its_active_hours() -> None:
    day = active_hours_curve(8)
    assert sum(day) == 8 and day.count(1.0) == 8 and day[21] == 1.0 and day[13] == 0.0
    assert sum(active_hours_curve(7.5)) == pytest.approx(7.5)
    assert active_hours_curve(24) == (1.0,) * 24
    p = plan()
    assert max(p.load.hourly_qps) == pytest.approx(p.load.avg_qps)  # 520.8 in each hour
    assert p.load.burst == pytest.approx(3.0)
    assert sum(q > 0 for q in p.load.hourly_qps) == 8


def test_the_planner_keeps_the_seed_load_exactly() -> None:
    """The pool split changes GPUs, not the load: QPS and tokens/s are the seed's."""
    p = plan()
    s = p.seed
    assert p.load.avg_qps == pytest.approx(s.avg_qps)
    assert p.load.peak_qps == pytest.approx(s.peak_qps)
    assert p.load.tokens_per_s_avg == pytest.approx(s.tokens_per_s_avg)
    assert p.load.tokens_per_s_peak == pytest.approx(s.tokens_per_s_peak)
    assert p.load.prompt_tokens_per_s_avg == pytest.approx(s.avg_qps * 2_000)
    assert p.load.output_tokens_per_s_avg == pytest.approx(s.avg_qps * 500)
    # and its GPUs land in the seed's range
    assert SEED_FIGURES["gpus_avg"] * 0.8 < p.gpus_avg < p.gpus_peak < SEED_FIGURES["gpus_peak"]


def test_littles_law_streams_and_pool_lengths() -> None:
    p = plan()
    chat = next(pp for pp in p.pools if pp.name == "chat")
    assert chat.output_tokens == pytest.approx(350)
    assert chat.peak_qps == pytest.approx(1_250)
    # 1,250/s × (0.3 s TTFT + 350 tokens ÷ 70 tokens/s)
    assert chat.concurrent_streams_peak == pytest.approx(1_250 * 5.3)
    assert p.load.concurrent_streams_peak == pytest.approx(
        sum(pp.concurrent_streams_peak for pp in p.pools)
    )


# --- directions -------------------------------------------------------------------------------


def test_more_users_need_more_gpus() -> None:
    plans = [plan(with_workload(dau=d)) for d in (1e4, 1e5, 1e6, 1e7, 1e8)]
    peaks = [p.gpus_peak for p in plans]
    assert peaks == sorted(peaks)
    assert peaks[-1] > peaks[2] > peaks[0]
    for name in ("chat", "reasoning"):
        per_pool = [next(pp.gpus_peak for pp in p.pools if pp.name == name) for p in plans]
        assert per_pool == sorted(per_pool)
    costs = [p.cost_month_autoscaled_usd for p in plans]
    assert costs == sorted(costs)


def test_faster_gpus_mean_fewer() -> None:
    counts = [
        plan(replace(with_workload(dau=1e7), hardware=scaled_hardware(f))).gpus_peak
        for f in (0.5, 1.0, 2.0, 4.0)
    ]
    assert counts == sorted(counts, reverse=True)
    assert counts[0] > counts[1] > counts[2] > counts[3]
    seed_slow = seed_estimate(Workload(), replace(Hardware(), seed_tokens_per_s_per_gpu=2_000))
    assert seed_slow.gpus_peak == pytest.approx(2 * seed_estimate(Workload(), Hardware()).gpus_peak)


def test_the_concurrency_bound_takes_over_when_a_gpu_holds_few_sequences() -> None:
    hw = Hardware()
    pools = {k: replace(v, max_seqs_per_gpu=4) for k, v in hw.pools.items()}
    p = plan(replace(Inputs(), hardware=replace(hw, pools=pools)))
    for pp in p.pools:
        assert pp.bound == "concurrency"
        assert pp.gpus_peak >= pp.concurrent_streams_peak / 4 / hw.target_utilisation
    assert p.gpus_peak > plan().gpus_peak


def test_prefix_cache_hits_save_prefill() -> None:
    cached = plan(with_workload(prefix_cache_hit_rate=0.8))
    assert cached.gpus_peak < plan().gpus_peak
    assert cached.load.prompt_tokens_per_s_peak == plan().load.prompt_tokens_per_s_peak


@settings(max_examples=60, deadline=None)
@given(
    dau=st.floats(1e3, 3e8),
    peak=st.floats(1.0, 6.0),
    shape=st.lists(st.floats(0.0, 5.0), min_size=24, max_size=24).filter(lambda s: sum(s) > 0.1),
    lag=st.floats(0.0, 90.0),
    margin=st.floats(0.0, 1.0),
    floor=st.floats(0.0, 1.0),
)
def test_autoscaling_never_costs_more_than_static(
    dau: float, peak: float, shape: list[float], *, lag: float, margin: float, floor: float
) -> None:
    inputs = replace(
        with_workload(dau=dau, peak_factor=peak, diurnal=tuple(shape)),
        autoscaling=Autoscaling(scale_up_lag_min=lag, margin=margin, min_fraction_of_peak=floor),
    )
    p = plan(inputs)
    assert p.cost_month_autoscaled_usd <= p.cost_month_static_usd + 1e-6
    for pp in p.pools:
        assert pp.cost_month_autoscaled_usd <= pp.cost_month_static_usd + 1e-6
        assert max(pp.hourly_replicas) <= pp.replicas_peak
        assert min(pp.hourly_replicas) >= min(2, pp.replicas_peak)


def test_autoscaling_saves_on_a_curved_day_and_nothing_on_a_flat_one() -> None:
    curved = plan(with_workload(dau=1e7, active_hours_per_day=24, diurnal=CONSUMER_DIURNAL))
    assert curved.cost_month_autoscaled_usd < 0.8 * curved.cost_month_static_usd
    flat = plan(with_workload(dau=1e7, peak_factor=1.0, diurnal=(1.0,) * 24))
    assert flat.cost_month_autoscaled_usd == pytest.approx(flat.cost_month_static_usd)
    pinned = plan(replace(curved.inputs, autoscaling=Autoscaling(min_fraction_of_peak=1)))
    assert pinned.cost_month_autoscaled_usd == pytest.approx(pinned.cost_month_static_usd)
    # starting replicas before the rise costs GPU-hours
    eager = plan(replace(curved.inputs, autoscaling=Autoscaling(scale_up_lag_min=30)))
    assert eager.cost_month_autoscaled_usd > curved.cost_month_autoscaled_usd


# --- Kafka, edges -----------------------------------------------------------------------------


def test_friendly_counts_are_the_smallest_2k_or_3_2k_at_or_above() -> None:
    friendly = sorted({2**k for k in range(16)} | {3 * 2**k for k in range(15)})
    for n in range(1, 5_000):
        got = friendly_count(n)
        assert got == next(f for f in friendly if f >= n), n
    assert friendly_count(0) == 1
    assert friendly_count(339) == 384


@pytest.mark.parametrize("dau", [1e5, 1e6, 1e8])
def test_every_consumer_gets_a_partition(dau: float) -> None:
    p = plan(with_workload(dau=dau, voice_share=0.1))
    replicas = {pp.name: pp.replicas_peak for pp in p.pools}
    roles = {r.name: r.processes for r in p.roles}
    for t in p.topics:
        assert t.partitions >= t.partitions_for_throughput
        assert t.partitions >= t.consumer_processes
        for consumer in t.consumers:
            assert t.partitions >= replicas.get(consumer, roles.get(consumer, 0))
        assert t.cells == math.ceil(t.partitions / 4096)
    inference = {t.name: t for t in p.topics if t.name.startswith("inference.")}
    assert set(inference) == {"inference.chat", "inference.reasoning"}
    assert inference["inference.chat"].partitions >= replicas["chat"]
    if dau == 1e8:
        assert any("cells" in n for n in p.notes)


def test_edges_take_the_largest_of_connections_tokens_and_cpu() -> None:
    p = plan()
    e = p.edge
    assert e.by_tokens == math.ceil(p.load.output_tokens_per_s_peak / 5_000)
    assert e.processes == max(e.by_connections, e.by_tokens, e.by_cpu, 2)
    assert e.processes == p.fleet.role("edge").processes
    roomy = plan(replace(Inputs(), platform=replace(Inputs().platform, edge_tokens_per_s=1e9)))
    assert roomy.edge.processes == max(roomy.edge.by_connections, roomy.edge.by_cpu, 2)
    assert roomy.edge.by_connections == math.ceil(roomy.edge.connections_peak / 10_000)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="shares"):
        plan(with_workload(pools=(PoolMix("chat", 0.5), PoolMix("reasoning", 0.4))))
    with pytest.raises(ValueError, match="output_scale"):
        plan(with_workload(pools=(PoolMix("chat", 0.8), PoolMix("reasoning", 0.2, 1, 2))))
    with pytest.raises(ValueError, match="hardware"):
        plan(with_workload(pools=(PoolMix("vision", 1.0),)))
    with pytest.raises(ValueError, match="active hours"):
        plan(with_workload(active_hours_per_day=0))


# --- measurements -----------------------------------------------------------------------------


def test_bench_file_simple_format() -> None:
    m = parse_bench(
        {
            "chat": {"tokens_per_s_per_gpu": 2400, "ttft_p99_ms": 210},
            "reasoning": {"tokens_per_s_per_gpu": 900, "prefill_tokens_per_s_per_gpu": 7000},
        }
    )
    assert m["chat"].tokens_per_s_per_gpu == 2400
    assert m["chat"].ttft_p99_ms == 210
    assert m["chat"].prefill_tokens_per_s_per_gpu is None
    assert m["reasoning"].prefill_tokens_per_s_per_gpu == 7000
    for bad in ({"chat": {"ttft_p99_ms": 10}}, {"chat": {"tokens_per_s_per_gpu": -1}}, [], {}):
        with pytest.raises(MeasurementError):
            parse_bench(bad)


def test_bench_file_pipeline_latency_format() -> None:
    data = {
        "engine": "vllm",
        "max_tokens": 64,
        "turns_per_s": {"1": 0.25, "16": 2.0, "128": 1.5},
        "rows": [
            {"streams": 16, "metric": "ttft", "q": 99, "pipeline_ms": 800.0},
            {"streams": 16, "metric": "itl", "q": 50, "pipeline_ms": 100.0},
            {"streams": 1, "metric": "itl", "q": 50, "pipeline_ms": 50.0},
        ],
    }
    m = parse_bench(data, pools=("chat",))
    assert list(m) == ["chat"]
    assert m["chat"].tokens_per_s_per_gpu == pytest.approx(2.0 * 64)  # the best concurrency
    assert m["chat"].ttft_p99_ms == 800.0
    assert m["chat"].user_tokens_per_s == pytest.approx(10.0)
    assert m["chat"].max_seqs_per_gpu == 16


def trace_row(pool: str, **kw: float) -> tuple:
    row = {
        "pool": pool,
        "turns": 100,
        "workers": 2,
        "prompt_tokens": 200_000,
        "cached_prompt_tokens": 50_000,
        "completion_tokens": 30_000,
        "decode_s": 600.0,
        "ttft_p99_ms": 250.0,
        "first_ms": 0,
        "last_ms": 1_000_000,
    }
    row.update(kw)
    return tuple(row[c] for c in TRACES_COLUMNS)


def metric_row(pool: str, worker: str, **kw: float) -> tuple:
    row = {
        "pool": pool,
        "worker_id": worker,
        "busy_s": 500.0,
        "busy_generated": 500_000,
        "saturated_s": 100.0,
        "saturated_generated": 300_000,
        "saturated_prefilled": 1_200_000,
        "max_running": 48,
    }
    row.update(kw)
    return tuple(row[c] for c in METRICS_COLUMNS)


def test_measured_rows_become_per_gpu_rates() -> None:
    traces = [trace_row("chat"), trace_row("reasoning")]
    metrics = [
        metric_row("chat", "a"),  # saturated: 3,000 tokens/s
        metric_row("chat", "b", saturated_generated=500_000),  # 5,000 tokens/s
        metric_row("chat", "c", saturated_s=10.0),  # too briefly saturated: not counted
        metric_row("reasoning", "r", saturated_s=0.0, busy_generated=400_000),  # 800/s busy
    ]
    m = pool_measurements(traces, metrics, gpus_per_worker={"reasoning": 2})
    chat, reasoning = m["chat"], m["reasoning"]
    assert chat.saturated
    assert chat.tokens_per_s_per_gpu == pytest.approx(4_000)  # mean of 3,000 and 5,000
    assert chat.max_seqs_per_gpu == 48
    assert chat.user_tokens_per_s == pytest.approx(30_000 / 600)  # completion ÷ decode time
    assert chat.ttft_p99_ms == 250.0
    assert chat.prompt_tokens_per_output_token == pytest.approx(2_400_000 / 800_000)
    assert not reasoning.saturated
    assert reasoning.tokens_per_s_per_gpu == pytest.approx(800 / 2)
    assert reasoning.max_seqs_per_gpu is None
    assert "lower bound" in reasoning.source


def test_traces_alone_give_a_lower_bound_and_poolless_rows_go_to_the_default() -> None:
    m = pool_measurements([trace_row("", completion_tokens=40_000, workers=4)], [])
    assert list(m) == ["chat"]
    # 40,000 tokens over 1,000 s over 4 workers
    assert m["chat"].tokens_per_s_per_gpu == pytest.approx(10.0)
    assert not m["chat"].saturated
    assert m["chat"].prompt_tokens_per_output_token == pytest.approx(150_000 / 40_000)
    with pytest.raises(MeasurementError):
        pool_measurements([("chat", 1)], [])
    # rows of the default pool with and without its name merge
    both = [
        trace_row("chat", completion_tokens=10_000, workers=1, ttft_p99_ms=100.0),
        trace_row("", completion_tokens=30_000, workers=1, ttft_p99_ms=300.0, last_ms=2_000_000),
    ]
    merged = pool_measurements(both, [])["chat"]
    assert merged.tokens_per_s_per_gpu == pytest.approx(40_000 / 2_000 / 2)
    assert merged.ttft_p99_ms == 300.0
    assert merged.user_tokens_per_s == pytest.approx(40_000 / 1_200)


def test_the_sql_reads_the_documented_tables() -> None:
    t, w = traces_sql(6, db="ts"), metrics_sql(6, db="ts")
    assert "FROM ts.traces FINAL" in t and "INTERVAL 6 HOUR" in t and "GROUP BY pool" in t
    assert "FROM ts.worker_metrics" in w and "waiting > 0" in w
    # one selected expression per name the pure function reads, aliases in that order
    for sql, columns in ((t, TRACES_COLUMNS), (w, METRICS_COLUMNS)):
        items = top_level_items(sql.split(" FROM ")[0].removeprefix("SELECT "))
        assert len(items) == len(columns)
        for item, column in zip(items, columns, strict=True):
            assert item == column or item.endswith(f" AS {column}") or " AS " not in item


def top_level_items(select: str) -> list[str]:
    """The comma-separated items of a SELECT list, commas inside parentheses kept."""
    items, depth, current = [], 0, ""
    for ch in select:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += ch
    return [*items, current.strip()]


def test_applying_measurements() -> None:
    hw = Hardware()
    measured = {
        "chat": PoolMeasurement("chat", 1_500, ttft_p99_ms=400, max_seqs_per_gpu=32),
        "reasoning": PoolMeasurement("reasoning", 10, ttft_p99_ms=200, saturated=False),
        "vision": PoolMeasurement("vision", 99),
    }
    new, messages = apply(hw, measured)
    chat, reasoning = new.pools["chat"], new.pools["reasoning"]
    assert chat.decode_tokens_per_s_per_gpu == 1_500
    assert chat.prefill_tokens_per_s_per_gpu is None  # the measured rate includes prompts
    assert chat.max_seqs_per_gpu == 32 and chat.ttft_s == pytest.approx(0.4)
    # a lower bound under the assumption keeps the assumed rate, takes the latency
    assert (
        reasoning.decode_tokens_per_s_per_gpu == hw.pools["reasoning"].decode_tokens_per_s_per_gpu
    )
    assert reasoning.ttft_s == pytest.approx(0.2)
    assert any("vision" in m for m in messages) and any("reasoning" in m for m in messages)
    p = plan(replace(Inputs(), hardware=new))
    assert any("chat: TTFT 400 ms" in n for n in p.notes)


# --- command line ----------------------------------------------------------------------------


def run_cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(args), out=out), out.getvalue()


def test_cli_prints_the_plan() -> None:
    rc, text = run_cli()
    assert rc == 0
    for part in ("Capacity plan: 1,000,000 DAU", "QPS average 520.8", "inference.chat", "Edge"):
        assert part in text


def test_cli_json_parses() -> None:
    rc, text = run_cli("--json", "--dau", "100000000")
    assert rc == 0
    data = json.loads(text)
    assert data["inputs"]["workload"]["dau"] == 1e8
    assert data["load"]["avg_qps"] == pytest.approx(52_083.33, abs=0.01)
    assert data["seed_figures"]["peak_qps"] == 1_500
    assert data["cost_month_autoscaled_usd"] <= data["cost_month_static_usd"]
    assert {p["name"] for p in data["pools"]} == {"chat", "reasoning"}


def test_cli_seed_example_side_by_side() -> None:
    rc, text = run_cli("--seed-example")
    assert rc == 0
    assert "~1,500" in text and "1,562.5" in text and "325.5" in text and "976.6" in text
    assert "$2.16M" in text and "$306,720" in text and "$378,720" in text
    assert " NO" not in text  # every figure is the seed's
    assert "a consumer day (24 h curve)" in text


def test_cli_from_bench_and_plot(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"chat": {"tokens_per_s_per_gpu": 6_000}}))
    _, assumed = run_cli("--json")
    plot = tmp_path / "d.png"
    rc, measured = run_cli("--json", "--from-bench", str(results), "--plot", str(plot))
    assert rc == 0
    chat = next(p for p in json.loads(measured)["pools"] if p["name"] == "chat")
    before = next(p for p in json.loads(assumed)["pools"] if p["name"] == "chat")
    assert chat["gpus_peak"] < before["gpus_peak"]
    assert chat["source"] == "results.json"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"args": {}}')
    assert run_cli("--from-bench", str(bad))[0] == 2
    assert run_cli("--from-bench", str(tmp_path / "missing.json"))[0] == 2
    assert run_cli("--active-hours", "0")[0] == 2

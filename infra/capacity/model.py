"""The capacity model: users → requests → QPS → tokens/s → GPUs per pool → cost, plus Kafka
partitions, edge processes and CPU roles. Pure arithmetic on frozen dataclasses; no I/O.

The seed's worked example
-------------------------
The defaults of `Workload` and `Hardware` are the seed's own inputs (docs/architecture.md
§4): 1M DAU × 3 sessions × 5 rounds, 8 active hours, a 3× burst buffer, 2,000 + 500 tokens,
4,000 tokens/s per GPU, $3 per GPU-hour. `seed_estimate` is the seed's arithmetic on them
(520.8 QPS, 1.30M tokens/s, 325.5 → 976.6 GPUs); `infra/capacity/seed.py` recomputes every
figure of the example (the $2.16M static month, the $300K–400K autoscaled one) and says how
each is read.

The planner proper (`plan`)
---------------------------
It keeps the seed's workload (so QPS and tokens/s are the seed's exactly) and replaces "one
rate per GPU" by what decides GPU counts in practice, per inference pool:

* a pool mix: 80% of requests to `chat` (small model, answers 0.7× the mean length = 350
  tokens) and 20% to `reasoning` (2.2× = 1,100 tokens); the mix's mean stays 500 tokens;
* per-GPU prefill and decode rates apart (a GPU's time per request = uncached prompt ÷
  prefill rate + output ÷ decode rate), divided by a target utilisation (0.8: queues and
  TTFT blow up near 100%): the throughput bound;
* a concurrency bound (Little's law): streams in flight = QPS × answer duration, where an
  answer lasts TTFT + output ÷ the per-user speed (~70 tokens/s, the design's target);
  GPUs ≥ streams ÷ the sequences one GPU holds (its KV cache);
* replicas of `gpus_per_replica` GPUs (tensor parallelism), at least `min_replicas`.

Default hardware (assumed, H100-80GB class under vLLM, bf16; replace with `measured`):
chat ≈ an 8B model on 1 GPU: prefill 20k tokens/s, decode 3k tokens/s, 64 sequences;
reasoning ≈ a 32B model on 2 GPUs: per GPU prefill 6k, decode 1k tokens/s, 24 sequences.

Autoscaling follows an hourly curve: by default the seed's, flat over the active hours and
empty outside them (`active_hours_curve`); `CONSUMER_DIURNAL` is one region's consumer day
(trough at 04:00 at 0.19× the daily mean, peak at 21:00 at 1.86×) for a 24-hour day. Each hour
is provisioned for its mean load times the within-hour burst the peak QPS leaves over the
busiest hour's mean (3.0 on the seed's flat day, 3 ÷ 1.86 = 1.61 on the consumer day), plus
`margin`, never below a floor (`min_replicas`, `min_fraction_of_peak` of the peak replicas),
never above the static peak; a replica takes `scale_up_lag_min` to start (weights, CUDA
graphs), so the last minutes of an hour before a rise already run the next hour's replicas.

The fleet around the GPUs (`fleet.py`) comes from the cost benchmark's measured CPU per turn of
every role, the broker and Redis included, and its Kafka records and bytes per turn
(`costs.py`: `--from-cost` reads a `bench.cost` results file; the default is one embedded
reading). One edge process holds 10k connections at 21 KB and delivers 5,000 tokens/s
(bench.connections); speech: ~0.67 core-s of Whisper per spoken turn, piper ~16 ms of CPU per
spoken character. Kafka partitions are sized at 10 MB/s and 10k messages/s each, at least one
per consumer process, rounded to 2^k or 3·2^k.
"""

# ruff: noqa: RUF001, RUF002, RUF003  (× ÷ – are the arithmetic this module documents)
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.capacity.costs import DEFAULT_COSTS, FleetParameters, PlatformCosts
from infra.capacity.fleet import Fleet, RoleFleet, size_fleet, size_roles

HOURS_PER_MONTH = 24 * 30
SECONDS_PER_HOUR = 3600.0

# Relative load per hour of the day (0..23, one region's consumer chat day); normalised to a
# mean of 1 where used, so only the shape matters.
CONSUMER_DIURNAL: tuple[float, ...] = (
    0.50, 0.35, 0.25, 0.20, 0.18, 0.22, 0.35, 0.60, 0.85, 1.05, 1.15, 1.20,
    1.25, 1.20, 1.15, 1.15, 1.20, 1.30, 1.45, 1.60, 1.75, 1.80, 1.50, 0.95,
)  # fmt: skip


@dataclass(frozen=True)
class PoolMix:
    """One inference pool's share of requests; its prompt and answer lengths relative to the
    workload's means (the shares' weighted scales must average 1, so the totals are the
    workload's)."""

    name: str
    share: float
    prompt_scale: float = 1.0
    output_scale: float = 1.0


DEFAULT_POOLS: tuple[PoolMix, ...] = (
    PoolMix("chat", 0.8, output_scale=0.7),
    PoolMix("reasoning", 0.2, output_scale=2.2),
)


@dataclass(frozen=True)
class Workload:
    """Who uses the product and how much; the defaults are the seed's example."""

    dau: float = 1_000_000
    sessions_per_user_per_day: float = 3
    rounds_per_session: float = 5
    prompt_tokens: float = 2_000  # mean over pools, history included
    output_tokens: float = 500  # mean over pools
    active_hours_per_day: float = 8  # the day's traffic falls in these hours (seed: ~8)
    peak_factor: float = 3.0  # peak QPS ÷ average QPS
    pools: tuple[PoolMix, ...] = DEFAULT_POOLS
    prefix_cache_hit_rate: float = 0.0  # prompt tokens served from the prefix cache
    think_time_s: float = 20.0  # a user reads and types between rounds (connection held)
    connection_linger_s: float = 60.0  # socket kept open after a session's last answer
    voice_share: float = 0.0  # turns spoken in and answered in speech
    # relative load per hour; None: flat over the active hours (the seed's reading)
    diurnal: tuple[float, ...] | None = None

    @property
    def requests_per_day(self) -> float:
        return self.dau * self.sessions_per_user_per_day * self.rounds_per_session

    @property
    def hourly_shape(self) -> tuple[float, ...]:
        return (
            self.diurnal
            if self.diurnal is not None
            else active_hours_curve(self.active_hours_per_day)
        )


def active_hours_curve(hours: float, last_hour: int = 22) -> tuple[float, ...]:
    """The seed's day: all traffic, evenly, in the `hours` hours before `last_hour`:00 (a
    fractional first hour gets its fraction), nothing in the others."""
    shape = [0.0] * 24
    left = hours
    h = last_hour - 1
    while left > 1e-9:
        shape[h % 24] = min(1.0, left)
        left -= 1.0
        h -= 1
    return tuple(shape)


@dataclass(frozen=True)
class PoolHardware:
    """What one GPU of a pool does. `prefill_tokens_per_s_per_gpu=None` means the decode
    figure already pays for the prompts (a rate measured on the real mix)."""

    prefill_tokens_per_s_per_gpu: float | None
    decode_tokens_per_s_per_gpu: float
    max_seqs_per_gpu: float
    gpus_per_replica: int = 1
    gpu_usd_per_hour: float = 3.0  # the seed's price
    user_tokens_per_s: float = 70.0  # one stream's decode speed (design target ~70)
    ttft_s: float = 0.3  # time to first token inside an answer's duration
    source: str = "assumed"


def default_pool_hardware() -> dict[str, PoolHardware]:
    """Assumed H100-class figures (see the module docstring)."""
    return {
        "chat": PoolHardware(20_000, 3_000, 64, gpus_per_replica=1),
        "reasoning": PoolHardware(6_000, 1_000, 24, gpus_per_replica=2),
    }


@dataclass(frozen=True)
class Hardware:
    pools: Mapping[str, PoolHardware] = field(default_factory=default_pool_hardware)
    target_utilisation: float = 0.8  # plan GPUs to run at most this busy
    ttft_target_s: float = 0.3  # the design's TTFT p99 target, for notes only
    seed_tokens_per_s_per_gpu: float = 4_000  # the seed's one rate (prompt + output)
    seed_gpu_usd_per_hour: float = 3.0  # the seed's price per GPU-hour


@dataclass(frozen=True)
class Autoscaling:
    min_replicas: int = 2  # per pool, always (one failure must not stop a pool)
    min_fraction_of_peak: float = 0.15  # warm floor, of the peak replicas
    scale_up_lag_min: float = 10.0  # a new replica's start: pull, load weights, warm up
    margin: float = 0.10  # extra over the hour's need while following load


@dataclass(frozen=True)
class Platform:
    edge_tokens_per_s: float = 5_000  # one edge process, measured (bench.connections)
    edge_connections: int = 10_000  # one edge process, measured
    edge_kb_per_connection: float = 21.0
    min_edge_processes: int = 2
    kafka_partition_mb_per_s: float = 10.0
    kafka_partition_msgs_per_s: float = 10_000
    max_partitions_per_topic: int = 4_096  # beyond: split into cells (a topic per cell)
    costs: PlatformCosts = DEFAULT_COSTS  # per turn, by role (bench.cost; costs.py)
    fleet: FleetParameters = field(default_factory=FleetParameters)
    asr_core_s_per_voice_turn: float = 0.67  # Whisper tiny.en int8, 12 audio-s/s on 2 cores
    tts_core_ms_per_char: float = 16.0  # piper, 150–330 ms per 15-character piece
    chars_per_token: float = 4.0
    tts_segment_chars: float = 15
    metrics_per_s_per_replica: float = 2.0  # TURNSTREAM_METRICS_INTERVAL_MS = 500


@dataclass(frozen=True)
class Inputs:
    workload: Workload = field(default_factory=Workload)
    hardware: Hardware = field(default_factory=Hardware)
    platform: Platform = field(default_factory=Platform)
    autoscaling: Autoscaling = field(default_factory=Autoscaling)


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeedEstimate:
    """The seed's method: all tokens ÷ one per-GPU rate, no utilisation target."""

    requests_per_day: float
    avg_qps: float
    peak_qps: float
    tokens_per_s_avg: float
    tokens_per_s_peak: float
    gpus_avg: float
    gpus_peak: float
    cost_month_static_usd: float  # ceil(gpus_peak) all month


@dataclass(frozen=True)
class Load:
    requests_per_day: float
    avg_qps: float
    peak_qps: float
    burst: float  # peak ÷ the busiest hour's mean (within-hour peaks)
    prompt_tokens_per_s_avg: float
    output_tokens_per_s_avg: float
    prompt_tokens_per_s_peak: float
    output_tokens_per_s_peak: float
    mean_answer_s: float
    concurrent_streams_peak: float
    concurrent_connections_peak: float
    hourly_qps: tuple[float, ...]  # each hour's mean QPS
    tokens_per_month: float

    @property
    def tokens_per_s_avg(self) -> float:
        return self.prompt_tokens_per_s_avg + self.output_tokens_per_s_avg

    @property
    def tokens_per_s_peak(self) -> float:
        return self.prompt_tokens_per_s_peak + self.output_tokens_per_s_peak


@dataclass(frozen=True)
class PoolPlan:
    name: str
    share: float
    prompt_tokens: float
    output_tokens: float
    avg_qps: float
    peak_qps: float
    answer_s: float
    concurrent_streams_peak: float
    gpus_throughput_peak: float  # fractional, utilisation included
    gpus_concurrency_peak: float
    bound: str  # throughput | concurrency | floor
    gpus_per_replica: int
    replicas_peak: int
    gpus_peak: int  # provisioned at peak
    gpus_avg: int  # what the average load needs (flat day)
    hourly_replicas: tuple[int, ...]  # autoscaled, per hour of the day
    gpu_hours_per_day_autoscaled: float
    gpu_usd_per_hour: float
    cost_month_static_usd: float
    cost_month_autoscaled_usd: float
    source: str
    ttft_s: float


@dataclass(frozen=True)
class TopicPlan:
    name: str
    msgs_per_s_peak: float
    mb_per_s_peak: float
    consumers: tuple[str, ...]
    consumer_processes: int  # the largest consuming group's processes
    partitions_for_throughput: int
    partitions: int  # 2^k or 3·2^k, ≥ both
    cells: int  # topics (or clusters) the partitions must be split over


@dataclass(frozen=True)
class EdgePlan:
    connections_peak: float
    output_tokens_per_s_peak: float
    by_connections: int
    by_tokens: int
    by_cpu: int
    processes: int
    memory_gb: float


@dataclass(frozen=True)
class Plan:
    inputs: Inputs
    seed: SeedEstimate
    load: Load
    pools: tuple[PoolPlan, ...]
    topics: tuple[TopicPlan, ...]
    edge: EdgePlan
    fleet: Fleet  # every CPU role, brokers and Redis at peak
    gpus_peak: int
    gpus_avg: int
    hourly_gpus_autoscaled: tuple[int, ...]  # all pools, per hour
    cost_month_static_usd: float
    cost_month_autoscaled_usd: float
    usd_per_million_tokens_static: float
    usd_per_million_tokens_autoscaled: float
    notes: tuple[str, ...]

    @property
    def roles(self) -> tuple[RoleFleet, ...]:
        return self.fleet.roles


# --- arithmetic ------------------------------------------------------------------------------


def seed_estimate(workload: Workload, hardware: Hardware) -> SeedEstimate:
    """The seed's arithmetic on the workload's means (see the module docstring)."""
    per_day = workload.requests_per_day
    avg_qps = per_day / (workload.active_hours_per_day * SECONDS_PER_HOUR)
    peak_qps = avg_qps * workload.peak_factor
    tokens = workload.prompt_tokens + workload.output_tokens
    rate = hardware.seed_tokens_per_s_per_gpu
    gpus_peak = peak_qps * tokens / rate
    return SeedEstimate(
        requests_per_day=per_day,
        avg_qps=avg_qps,
        peak_qps=peak_qps,
        tokens_per_s_avg=avg_qps * tokens,
        tokens_per_s_peak=peak_qps * tokens,
        gpus_avg=avg_qps * tokens / rate,
        gpus_peak=gpus_peak,
        cost_month_static_usd=math.ceil(gpus_peak - 1e-9)
        * HOURS_PER_MONTH
        * hardware.seed_gpu_usd_per_hour,
    )


def friendly_count(n: float) -> int:
    """The smallest 2^k or 3·2^k ≥ n: divides evenly among many consumer counts, and growing
    a topic to the next one never more than doubles it."""
    need = max(1, math.ceil(n - 1e-9))
    power = 1
    while True:
        if power >= need:
            return power
        if power * 3 // 2 >= need and power >= 2:
            return power * 3 // 2
        power *= 2


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - 1e-9))


def validate(inputs: Inputs) -> None:
    """Reject inputs the arithmetic would silently turn into nonsense."""
    w, h = inputs.workload, inputs.hardware
    if min(w.dau, w.sessions_per_user_per_day, w.rounds_per_session) < 0:
        raise ValueError("DAU, sessions and rounds must be ≥ 0")
    if not 0 < w.active_hours_per_day <= 24:
        raise ValueError("active hours per day must be in (0, 24]")
    if w.peak_factor < 1:
        raise ValueError("the peak factor is peak ÷ average: ≥ 1")
    shape = w.hourly_shape
    if len(shape) != 24 or min(shape) < 0 or sum(shape) <= 0:
        raise ValueError("the diurnal curve needs 24 non-negative values, not all zero")
    if not w.pools:
        raise ValueError("at least one pool")
    if abs(sum(p.share for p in w.pools) - 1) > 1e-6:
        raise ValueError("pool shares must add up to 1")
    for attr in ("prompt_scale", "output_scale"):
        mean = sum(p.share * getattr(p, attr) for p in w.pools)
        if abs(mean - 1) > 1e-6:
            raise ValueError(f"the pools' share-weighted {attr} must be 1 (it is {mean:.4f})")
    missing = [p.name for p in w.pools if p.name not in h.pools]
    if missing:
        raise ValueError(f"no hardware for pool(s) {', '.join(missing)}")
    if not 0 < h.target_utilisation <= 1:
        raise ValueError("target utilisation must be in (0, 1]")
    if not 0 <= w.prefix_cache_hit_rate < 1 or not 0 <= w.voice_share <= 1:
        raise ValueError("prefix-cache hit rate in [0, 1), voice share in [0, 1]")
    for name, hw in h.pools.items():
        rates = (hw.decode_tokens_per_s_per_gpu, hw.max_seqs_per_gpu, hw.user_tokens_per_s)
        if min(rates) <= 0 or hw.gpus_per_replica < 1:
            raise ValueError(f"pool {name}: rates, sequences and GPUs per replica must be > 0")
        if hw.prefill_tokens_per_s_per_gpu is not None and hw.prefill_tokens_per_s_per_gpu <= 0:
            raise ValueError(f"pool {name}: prefill rate must be > 0 (or None)")


def _pool_need(
    qps: float, *, prompt: float, output: float, hit: float, hw: PoolHardware, util: float
) -> tuple[float, float]:
    """(throughput bound, concurrency bound) in GPUs for `qps` requests/s of this pool."""
    gpu_s = output / hw.decode_tokens_per_s_per_gpu
    if hw.prefill_tokens_per_s_per_gpu is not None:
        gpu_s += prompt * (1 - hit) / hw.prefill_tokens_per_s_per_gpu
    streams = qps * (hw.ttft_s + output / hw.user_tokens_per_s)
    return qps * gpu_s / util, streams / hw.max_seqs_per_gpu / util


def _hourly_replicas(
    need_gpus: list[float], hw: PoolHardware, peak_replicas: int, auto: Autoscaling
) -> tuple[int, ...]:
    floor = max(auto.min_replicas, _ceil(auto.min_fraction_of_peak * peak_replicas))
    floor = min(floor, peak_replicas)
    return tuple(
        min(peak_replicas, max(floor, _ceil(g * (1 + auto.margin) / hw.gpus_per_replica)))
        for g in need_gpus
    )


def _gpu_hours(replicas: tuple[int, ...], gpus_per_replica: int, lag_min: float) -> float:
    """GPU-hours over the day: each hour runs its replicas, and its last `lag_min` minutes
    already run the next hour's when those are more (they must be started before needed)."""
    lag = min(max(lag_min, 0.0), 60.0) / 60.0
    total = 0.0
    for h, r in enumerate(replicas):
        nxt = replicas[(h + 1) % len(replicas)]
        total += (1 - lag) * r + lag * max(r, nxt)
    return total * gpus_per_replica


def _pool_plan(
    mix: PoolMix,
    inputs: Inputs,
    *,
    avg_qps: float,
    peak_qps: float,
    hourly_qps: tuple[float, ...],
    burst: float,
) -> PoolPlan:
    """One pool: its GPUs at peak (the larger bound, whole replicas), at average load, and
    per hour when autoscaled; its cost both ways."""
    w, h, auto = inputs.workload, inputs.hardware, inputs.autoscaling
    hw = h.pools[mix.name]
    prompt, output = w.prompt_tokens * mix.prompt_scale, w.output_tokens * mix.output_scale
    shape = {
        "prompt": prompt,
        "output": output,
        "hit": w.prefix_cache_hit_rate,
        "hw": hw,
        "util": h.target_utilisation,
    }
    pool_peak, pool_avg = peak_qps * mix.share, avg_qps * mix.share
    answer_s = hw.ttft_s + output / hw.user_tokens_per_s
    tp, cc = _pool_need(pool_peak, **shape)
    gpr = hw.gpus_per_replica
    replicas = max(auto.min_replicas, _ceil(max(tp, cc) / gpr))
    bound = "throughput" if tp >= cc else "concurrency"
    if replicas * gpr - max(tp, cc) >= gpr:
        bound = "floor"
    gpus_avg = max(auto.min_replicas, _ceil(max(_pool_need(pool_avg, **shape)) / gpr)) * gpr
    hourly_need = [max(_pool_need(q * burst * mix.share, **shape)) for q in hourly_qps]
    hourly = _hourly_replicas(hourly_need, hw, replicas, auto)
    gpu_hours = _gpu_hours(hourly, gpr, auto.scale_up_lag_min)
    return PoolPlan(
        name=mix.name,
        share=mix.share,
        prompt_tokens=prompt,
        output_tokens=output,
        avg_qps=pool_avg,
        peak_qps=pool_peak,
        answer_s=answer_s,
        concurrent_streams_peak=pool_peak * answer_s,
        gpus_throughput_peak=tp,
        gpus_concurrency_peak=cc,
        bound=bound,
        gpus_per_replica=gpr,
        replicas_peak=replicas,
        gpus_peak=replicas * gpr,
        gpus_avg=gpus_avg,
        hourly_replicas=hourly,
        gpu_hours_per_day_autoscaled=gpu_hours,
        gpu_usd_per_hour=hw.gpu_usd_per_hour,
        cost_month_static_usd=replicas * gpr * HOURS_PER_MONTH * hw.gpu_usd_per_hour,
        cost_month_autoscaled_usd=gpu_hours * 30 * hw.gpu_usd_per_hour,
        source=hw.source,
        ttft_s=hw.ttft_s,
    )


def plan(inputs: Inputs | None = None) -> Plan:
    """The whole plan for `inputs` (defaults: the seed's example with our pool split)."""
    inputs = inputs or Inputs()
    validate(inputs)
    w, h, p = inputs.workload, inputs.hardware, inputs.platform
    seed = seed_estimate(w, h)
    per_day = w.requests_per_day
    avg_qps = seed.avg_qps
    shape = w.hourly_shape
    mean_shape = sum(shape) / 24
    hourly_qps = tuple(per_day * v / (24 * mean_shape) / SECONDS_PER_HOUR for v in shape)
    peak_qps = max(seed.peak_qps, *hourly_qps)
    burst = peak_qps / max(hourly_qps) if max(hourly_qps) > 0 else 1.0
    pools = [
        _pool_plan(
            mix, inputs, avg_qps=avg_qps, peak_qps=peak_qps, hourly_qps=hourly_qps, burst=burst
        )
        for mix in w.pools
    ]
    notes = [
        f"{pp.name}: TTFT {pp.ttft_s * 1000:.0f} ms ({pp.source}) is above the "
        f"{h.ttft_target_s * 1000:.0f} ms target: plan a lower utilisation or more GPUs"
        for pp in pools
        if pp.ttft_s > h.ttft_target_s
    ]
    streams_peak = sum(pp.concurrent_streams_peak for pp in pools)
    mean_answer_s = streams_peak / peak_qps if peak_qps else 0.0
    connections = peak_qps * (mean_answer_s + w.think_time_s)
    if w.rounds_per_session > 0:
        connections += peak_qps / w.rounds_per_session * w.connection_linger_s
    prompt_tokens = sum(pp.share * pp.prompt_tokens for pp in pools)
    output_tokens = sum(pp.share * pp.output_tokens for pp in pools)
    load = Load(
        requests_per_day=per_day,
        avg_qps=avg_qps,
        peak_qps=peak_qps,
        burst=burst,
        prompt_tokens_per_s_avg=avg_qps * prompt_tokens,
        output_tokens_per_s_avg=avg_qps * output_tokens,
        prompt_tokens_per_s_peak=peak_qps * prompt_tokens,
        output_tokens_per_s_peak=peak_qps * output_tokens,
        mean_answer_s=mean_answer_s,
        concurrent_streams_peak=streams_peak,
        concurrent_connections_peak=connections,
        hourly_qps=hourly_qps,
        tokens_per_month=per_day * 30 * (prompt_tokens + output_tokens),
    )
    bounds = {
        "edge": _edge_bounds(load, p),
        # one inference worker (the Python around an engine) per replica, whatever its CPU
        "inference": {"replicas": sum(pp.replicas_peak for pp in pools)},
    }
    roles = _roles(load, w, p, output_tokens, bounds)
    topics = _topics(load, w, p, pools, roles)
    fleet = size_fleet(
        load.peak_qps, p.costs, p.fleet, roles=roles, **_kafka_volume(load, p, topics)
    )
    for t in topics:
        if t.cells > 1:
            notes.append(
                f"{t.name}: {t.partitions:,} partitions is more than one topic should hold "
                f"({p.max_partitions_per_topic:,}): split the pool into {t.cells} cells, "
                "each with its own topic (and router)"
            )
    edge = _edge(load, p, bounds["edge"], fleet.role("edge"))
    if edge.by_tokens > edge.by_connections and p.edge_tokens_per_s == Platform().edge_tokens_per_s:
        notes.append(
            f"edges are sized by tokens delivered: {p.edge_tokens_per_s:,.0f} tokens/s per "
            "process is the load bench.connections offered, not a measured ceiling (its "
            "85–123 µs of edge CPU per token suggest ~8k per core): measure the ceiling "
            "before buying edges"
        )
    static = sum(pp.cost_month_static_usd for pp in pools)
    autoscaled = sum(pp.cost_month_autoscaled_usd for pp in pools)
    million_tokens = load.tokens_per_month / 1e6 or math.inf
    hourly_gpus = tuple(
        sum(pp.hourly_replicas[i] * pp.gpus_per_replica for pp in pools) for i in range(24)
    )
    return Plan(
        inputs=inputs,
        seed=seed,
        load=load,
        pools=tuple(pools),
        topics=topics,
        edge=edge,
        fleet=fleet,
        gpus_peak=sum(pp.gpus_peak for pp in pools),
        gpus_avg=sum(pp.gpus_avg for pp in pools),
        hourly_gpus_autoscaled=hourly_gpus,
        cost_month_static_usd=static,
        cost_month_autoscaled_usd=autoscaled,
        usd_per_million_tokens_static=static / million_tokens,
        usd_per_million_tokens_autoscaled=autoscaled / million_tokens,
        notes=tuple(notes),
    )


def _roles(
    load: Load,
    w: Workload,
    p: Platform,
    output_tokens: float,
    bounds: dict[str, dict[str, int]],
) -> tuple[RoleFleet, ...]:
    """The CPU roles at peak: measured CPU per turn per role, plus speech for voice turns;
    `bounds` are other lower bounds per role (an edge's connections and tokens, one
    inference worker per GPU replica)."""
    voice_qps = load.peak_qps * w.voice_share
    spoken_chars = output_tokens * p.chars_per_token
    extra = {
        "preprocess": voice_qps * p.asr_core_s_per_voice_turn,
        "tts": voice_qps * spoken_chars * p.tts_core_ms_per_char / 1000,
    }
    return size_roles(load.peak_qps, p.costs, p.fleet, extra_cores=extra, at_least=bounds)


def _kafka_volume(load: Load, p: Platform, topics: tuple[TopicPlan, ...]) -> dict[str, Any]:
    """MB/s written and partitions: the planned topics (sized for the workload's lengths),
    plus the topics only the cost benchmark knows (changelogs, verdicts), at their measured
    bytes per turn and the largest planned topic's partitions (a changelog has its source's)."""
    planned = {t.name for t in topics}
    widest = max((t.partitions for t in topics), default=1)
    measured_only = [n for n in p.costs.bytes_per_turn if n not in planned]
    mb = sum(t.mb_per_s_peak for t in topics)
    mb += load.peak_qps * sum(p.costs.bytes_per_turn[n] for n in measured_only) / 1e6
    partitions = sum(t.partitions for t in topics) + widest * len(measured_only)
    return {"mb_per_s": mb, "partitions": partitions}


def _topics(
    load: Load,
    w: Workload,
    p: Platform,
    pools: list[PoolPlan],
    roles: tuple[RoleFleet, ...],
) -> tuple[TopicPlan, ...]:
    """Partitions per topic: peak messages and bytes ÷ one partition's rate, and at least one
    partition per process of each consuming group (a process without one idles)."""
    q, cpt = load.peak_qps, p.chars_per_token
    output = sum(pp.share * pp.output_tokens for pp in pools)
    replicas = sum(pp.replicas_peak for pp in pools)
    # name: (messages/s, bytes per message, consuming roles); sizes are estimates: the JSON
    # envelope (~1 KB) plus the text the event carries
    flows: dict[str, tuple[float, float, tuple[str, ...]]] = {
        "turns.submitted": (q, 1_000, ("preprocess", "traces", "sink")),
        "turns.enriched": (q, 1_500, ("assembly", "traces", "sink")),
        "turns.completed": (q, output * cpt + 1_000, ("traces", "sink")),
        "traces": (q, output * 4 + 2_000, ("sink",)),  # the trace holds each token's gap
        "tts.segments": (q * w.voice_share * output * cpt / p.tts_segment_chars, 300, ("tts",)),
        "workers.metrics": (replicas * p.metrics_per_s_per_replica, 300, ("sink",)),
    }
    processes = {r.name: r.processes for r in roles}
    out = []
    for name, (msgs, size, consumers) in flows.items():
        procs = max(processes[c] for c in consumers)
        out.append(_topic(name, msgs, size, consumers=consumers, procs=procs, p=p))
    for pp in pools:
        size = pp.prompt_tokens * cpt + 1_000
        name = f"inference.{pp.name}"
        # the work queue is also the turn's assembled record: the sink's events log reads it
        out.append(
            _topic(
                name, pp.peak_qps, size, consumers=(pp.name, "sink"), procs=pp.replicas_peak, p=p
            )
        )
    return tuple(out)


def _topic(
    name: str, msgs: float, size: float, *, consumers: tuple[str, ...], procs: int, p: Platform
) -> TopicPlan:
    mb = msgs * size / 1e6
    by_rate = _ceil(max(msgs / p.kafka_partition_msgs_per_s, mb / p.kafka_partition_mb_per_s))
    partitions = friendly_count(max(by_rate, procs, 1))
    return TopicPlan(
        name=name,
        msgs_per_s_peak=msgs,
        mb_per_s_peak=mb,
        consumers=consumers,
        consumer_processes=procs,
        partitions_for_throughput=max(by_rate, 1),
        partitions=partitions,
        cells=_ceil(partitions / p.max_partitions_per_topic),
    )


def _edge_bounds(load: Load, p: Platform) -> dict[str, int]:
    """Edge processes enough for the connections held and for the tokens delivered."""
    return {
        "connections": _ceil(load.concurrent_connections_peak / p.edge_connections),
        "tokens": _ceil(load.output_tokens_per_s_peak / p.edge_tokens_per_s),
        "floor": p.min_edge_processes,
    }


def _edge(load: Load, p: Platform, bounds: dict[str, int], sized: RoleFleet) -> EdgePlan:
    """The edge's plan: its bounds beside the processes the fleet sizing chose."""
    cpu_cores = load.peak_qps * p.costs.cpu_ms_per_turn.get("edge", 0.0) / 1000
    usable = p.fleet.role_cpu_utilisation - p.costs.idle_core_share.get("edge", 0.0)
    return EdgePlan(
        connections_peak=load.concurrent_connections_peak,
        output_tokens_per_s_peak=load.output_tokens_per_s_peak,
        by_connections=bounds["connections"],
        by_tokens=bounds["tokens"],
        by_cpu=_ceil(cpu_cores / usable),
        processes=sized.processes,
        memory_gb=load.concurrent_connections_peak * p.edge_kb_per_connection / 1e6,
    )

"""The seed's worked example (docs/architecture.md §4), every figure recomputed from the seed's own
inputs, beside the figure the seed wrote.

    1,000,000 DAU × 3 sessions × 5 rounds          = 15,000,000 requests/day
    15,000,000 ÷ (8 active hours × 3,600 s)         = 520.8 QPS average        (seed ≈ 520)
    520.8 × a 3× burst buffer                       = 1,562.5 QPS              (seed ~1,500)
    2,000 input + 500 output tokens                 = 2,500 tokens per request
    520.8 × 2,500                                   = 1.30M tokens/s           (seed ≈ 1.3M)
    1.30M ÷ 4,000 tokens/s per GPU                  = 325.5 GPUs average       (seed ≈ 325)
    325.5 × 3 at peak                               = 976.6 GPUs               (seed ≈ 1,000)
    1,000 GPUs × $3/h × 24 × 30                     = $2,160,000/month static  (seed $2.16M)

The seed rounds the peak fleet to 1,000 before pricing it; priced unrounded (977 GPUs) the
month is $2.11M. The autoscaled month ($300K–400K, "nearly 80% less") comes with no arithmetic;
the reading that gives it with the seed's own figures: the fleet follows the load, so the 8
active hours run the *average* fleet (326 GPUs: the 3× buffer is for bursts, not hours), and
the other 16 hours keep a warm floor of 5–10% of the peak fleet (50–100 GPUs):

    (326 × 8 + 50 × 16) GPU-h/day × 30 × $3         = $306,720/month  (−86%)
    (326 × 8 + 100 × 16) GPU-h/day × 30 × $3        = $378,720/month  (−82%)

Where our planner differs (printed by `python -m infra.capacity --seed-example`): following the
*mean* inside the active hours needs replicas that start as fast as bursts come, and a replica
takes minutes (weights, CUDA graphs); the planner provisions each hour for its within-hour
burst. It also splits the load over a small and a reasoning pool with prefill and decode
rates apart, runs GPUs at ≤ 80%, and counts the KV cache's concurrency bound.
"""

# ruff: noqa: RUF001, RUF002, RUF003  (× ÷ – − ≈ are the arithmetic this module documents)
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from infra.capacity.model import HOURS_PER_MONTH, Hardware, Workload, seed_estimate

# What the seed wrote (docs/architecture.md §4), as numbers.
SEED_FIGURES: Mapping[str, float] = {
    "dau": 1_000_000,
    "requests_per_day": 15_000_000,
    "avg_qps": 520,
    "peak_qps": 1_500,
    "tokens_per_request": 2_500,
    "tokens_per_s": 1_300_000,
    "gpus_avg": 325,
    "gpus_peak": 1_000,
    "cost_month_static_usd": 2_160_000,
    "cost_month_autoscaled_low_usd": 300_000,
    "cost_month_autoscaled_high_usd": 400_000,
    "autoscaling_saving": 0.80,
}
ROUNDING = 0.05  # the seed's "≈" and "~": within 5%


@dataclass(frozen=True)
class SeedReconstruction:
    requests_per_day: float
    avg_qps: float
    peak_qps: float
    tokens_per_request: float
    tokens_per_s: float
    gpus_avg: float
    gpus_peak: float
    gpus_peak_rounded: int  # the fleet the seed prices
    cost_month_static_usd: float  # the rounded fleet around the clock
    cost_month_static_unrounded_usd: float  # ⌈gpus_peak⌉ around the clock
    cost_month_autoscaled_usd: tuple[float, float]  # floors of `floor_fractions`
    floor_fractions: tuple[float, float]
    autoscaling_saving: tuple[float, float]


def round_like_the_seed(gpus: float) -> int:
    """976.6 → 1,000: the seed rounds its peak fleet to the nearest hundred."""
    return int(round(gpus, -2))


def reconstruct(
    workload: Workload | None = None,
    hardware: Hardware | None = None,
    floor_fractions: tuple[float, float] = (0.05, 0.10),
) -> SeedReconstruction:
    """Every figure of the worked example from `workload` (default: the seed's inputs)."""
    w, h = workload or Workload(), hardware or Hardware()
    s = seed_estimate(w, h)
    price = h.seed_gpu_usd_per_hour
    rounded = round_like_the_seed(s.gpus_peak)
    static = rounded * price * HOURS_PER_MONTH
    active = w.active_hours_per_day
    autoscaled = tuple(
        (math.ceil(s.gpus_avg - 1e-9) * active + f * rounded * (24 - active)) * 30 * price
        for f in floor_fractions
    )
    return SeedReconstruction(
        requests_per_day=s.requests_per_day,
        avg_qps=s.avg_qps,
        peak_qps=s.peak_qps,
        tokens_per_request=w.prompt_tokens + w.output_tokens,
        tokens_per_s=s.tokens_per_s_avg,
        gpus_avg=s.gpus_avg,
        gpus_peak=s.gpus_peak,
        gpus_peak_rounded=rounded,
        cost_month_static_usd=static,
        cost_month_static_unrounded_usd=s.cost_month_static_usd,
        cost_month_autoscaled_usd=(autoscaled[0], autoscaled[1]),
        floor_fractions=floor_fractions,
        autoscaling_saving=(1 - autoscaled[0] / static, 1 - autoscaled[1] / static),
    )


@dataclass(frozen=True)
class Figure:
    name: str
    seed: str  # as the seed wrote it
    ours: float
    matches: bool


def figures(r: SeedReconstruction) -> tuple[Figure, ...]:
    """Each figure of the worked example: the seed's, ours, and whether ours is the seed's
    (within its rounding; the autoscaled month inside its range, the saving "nearly" 80%)."""
    f = SEED_FIGURES

    def near(ours: float, seed: float) -> bool:
        return abs(ours - seed) <= ROUNDING * seed

    def exact(name: str, written: str, ours: float, key: str) -> Figure:
        return Figure(name, written, ours, ours == f[key])

    lo, hi = f["cost_month_autoscaled_low_usd"], f["cost_month_autoscaled_high_usd"]
    monthly = r.cost_month_autoscaled_usd
    saving = r.autoscaling_saving
    return (
        exact("requests/day", "15M", r.requests_per_day, "requests_per_day"),
        Figure("QPS average", "≈ 520", r.avg_qps, near(r.avg_qps, f["avg_qps"])),
        Figure("QPS at peak (3× buffer)", "~1,500", r.peak_qps, near(r.peak_qps, f["peak_qps"])),
        exact("tokens per request", "2,500", r.tokens_per_request, "tokens_per_request"),
        Figure("tokens/s", "≈ 1.3M", r.tokens_per_s, near(r.tokens_per_s, f["tokens_per_s"])),
        Figure("GPUs average", "≈ 325", r.gpus_avg, near(r.gpus_avg, f["gpus_avg"])),
        Figure("GPUs at peak", "≈ 1,000", r.gpus_peak, near(r.gpus_peak, f["gpus_peak"])),
        exact("$/month static", "$2.16M", r.cost_month_static_usd, "cost_month_static_usd"),
        *(
            Figure(f"$/month autoscaled, {which} floor", "$300K–400K", usd, lo <= usd <= hi)
            for which, usd in zip(("low", "high"), monthly, strict=True)
        ),
        Figure(
            "autoscaling saves",
            "nearly 80%",
            min(saving),
            f["autoscaling_saving"] <= min(saving) and max(saving) <= 0.9,
        ),
    )

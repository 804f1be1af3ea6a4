"""The gate's metrics over items (means, per-turn sums, nearest-rank percentiles) and the
one-sided paired bootstrap that says whether a candidate is significantly worse."""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flywheel.gate.rollup import ItemScore
from schemas.stats import percentile

EPS = 1e-12


@dataclass(frozen=True, slots=True)
class Metric:
    """An aggregate over items: Σvalue/Σweight (a mean, or per turn when `per_turn`: weight =
    the item's turns), or a nearest-rank percentile (`quantile`, as ClickHouse reports)."""

    name: str
    label: str
    field: str
    higher_is_better: bool
    unit: str = ""  # "" (a rate or score) | ms | $ | tok
    quantile: float | None = None
    per_turn: bool = False


COVERAGE = "coverage"
METRICS: tuple[Metric, ...] = (
    Metric("ok_rate", "finished without error", "ok", True),
    Metric("reference_f1", "token F1 vs reference", "reference_f1", True),
    Metric("exact", "exact match", "exact", True),
    Metric("similarity", "embedding cosine vs reference", "similarity", True),
    Metric("judge", "judge grade", "judge", True),
    Metric("safe_rate", "red-team turns handled safely", "safe", True),
    Metric("over_refusal", "answer items refused", "refused", False),
    Metric("ttft_p50", "time to first token p50", "ttft_ms", False, "ms", quantile=50),
    Metric("ttft_p99", "time to first token p99", "ttft_ms", False, "ms", quantile=99),
    Metric("e2e_p50", "end-to-end latency p50", "e2e_ms", False, "ms", quantile=50),
    Metric("e2e_p99", "end-to-end latency p99", "e2e_ms", False, "ms", quantile=99),
    Metric("cost_per_turn", "cost per turn", "cost_usd", False, "$", per_turn=True),
    Metric("tokens_per_turn", "tokens per turn", "tokens", False, "tok", per_turn=True),
)
METRIC_BY_NAME = {m.name: m for m in METRICS}
HIGHER_IS_BETTER = {m.name: m.higher_is_better for m in METRICS} | {COVERAGE: True}


def aggregate(metric: Metric, values: np.ndarray, weights: np.ndarray) -> float:
    """The metric over one sample (NaN for an empty one)."""
    if values.size == 0:
        return math.nan
    if metric.quantile is not None:
        return float(percentile(values.tolist(), metric.quantile))
    return float(values.sum() / weights.sum()) if weights.sum() > 0 else math.nan


def aggregate_rows(metric: Metric, values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The metric of each row of (B, n) resamples, the same definition as `aggregate`."""
    if metric.quantile is not None:
        n = values.shape[1]
        k = max(1, min(n, math.ceil(metric.quantile / 100 * n))) - 1
        return np.partition(values, k, axis=1)[:, k]
    totals = weights.sum(axis=1)
    return np.divide(values.sum(axis=1), totals, out=np.full(len(totals), np.nan), where=totals > 0)


def metric_arrays(
    metric: Metric, items: dict[str, ItemScore], ids: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    values = np.array([getattr(items[i], metric.field) for i in ids], np.float64)
    weights = (
        np.array([items[i].turns for i in ids], np.float64)
        if metric.per_turn
        else np.ones(len(ids))
    )
    return values, weights


def worse_by(higher_is_better: bool, baseline: float, candidate: float) -> float:
    """How much worse the candidate is (negative: better), in the metric's units."""
    return baseline - candidate if higher_is_better else candidate - baseline


def paired_bootstrap_p(
    metric: Metric,
    base: tuple[np.ndarray, np.ndarray],
    cand: tuple[np.ndarray, np.ndarray],
    *,
    resamples: int,
    seed: int,
    chunk: int = 500,
) -> float:
    """One-sided p-value that the candidate is worse: the share of paired resamples (the
    same items drawn for both runs) in which it is not worse, (1 + count) / (1 + B). Equal
    runs give p = 1; a consistent regression gives p ≈ 1/(B+1)."""
    n = base[0].size
    rng = np.random.default_rng([seed, zlib.crc32(metric.name.encode())])
    not_worse = 0
    done = 0
    while done < resamples:
        rows = min(chunk, resamples - done)
        idx = rng.integers(0, n, size=(rows, n))
        b = aggregate_rows(metric, base[0][idx], base[1][idx])
        c = aggregate_rows(metric, cand[0][idx], cand[1][idx])
        worse = worse_by(metric.higher_is_better, b, c)
        not_worse += int(np.count_nonzero(~(worse > EPS)))  # NaN counts as not worse
        done += rows
    return (1 + not_worse) / (1 + resamples)

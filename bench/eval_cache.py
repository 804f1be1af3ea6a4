"""Semantic-cache hit rate on a workload with paraphrases, by similarity threshold.

`python -m bench.eval_cache [--threshold 0.96] [--redis URL] [--json OUT]`

Every group's seed question and every near-miss pair's stored side go into one tenant's
cache; then each paraphrase is looked up (it should hit its own group's seed) and each
near-miss probe (it must hit nothing). Scoring is in memory with the same selection code the
cache runs (`best_matches`, the exact repeat first), over real MiniLM embeddings, for a sweep
of thresholds, with and without the `conflicting` guards. With `--redis`, the workload also
runs through a real `SemanticCache` in a throwaway namespace at `--threshold`: the same
outcomes, and the lookup latency Redis adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stream_jobs.assembly.cache.rules import normalise_query
from stream_jobs.assembly.cache.semantic_cache import (
    DEFAULT_MAX_ENTRIES,
    DEFAULT_THRESHOLD,
    MiniLMEmbedder,
    SemanticCache,
)
from stream_jobs.assembly.cache.vectors import best_matches

WORKLOAD = Path(__file__).parent / "cache_sets" / "paraphrases_v1.jsonl"
THRESHOLDS = (0.85, 0.90, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98)
LEVELS = ("surface", "light", "reworded")


@dataclass(frozen=True, slots=True)
class Probe:
    text: str
    kind: str  # a paraphrase level, or "near_miss:<type>"
    expect: str | None  # the label of the stored entry it should hit; None: nothing


@dataclass(slots=True)
class Workload:
    stored: dict[str, str] = field(default_factory=dict)  # label -> question
    probes: list[Probe] = field(default_factory=list)


def load_workload(lines: list[str]) -> Workload:
    """Stored questions and probes from the JSONL records (pure)."""
    work = Workload()
    near: list[dict] = []
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        if record["kind"] == "group":
            work.stored[record["id"]] = record["seed"]
            for level in LEVELS:
                work.probes += [Probe(t, level, record["id"]) for t in record[level]]
        elif record["kind"] == "near_miss":
            near.append(record)
        else:
            raise ValueError(f"unknown record kind {record['kind']!r}")
    by_text = {normalise_query(q): label for label, q in work.stored.items()}
    for record in near:
        key = normalise_query(record["stored"])
        if key not in by_text:
            work.stored[record["id"]] = record["stored"]
            by_text[key] = record["id"]
        if normalise_query(record["probe"]) in by_text:
            raise ValueError(f"{record['id']}: the near-miss probe is itself stored")
        work.probes.append(Probe(record["probe"], f"near_miss:{record['type']}", None))
    return work


@dataclass(frozen=True, slots=True)
class Outcome:
    label: str | None  # the label hit, None on a miss
    score: float


@dataclass(frozen=True, slots=True)
class Stored:
    labels: list[str]
    queries: list[str]  # normalised
    matrix: np.ndarray  # their unit embeddings


def outcome_in_memory(
    stored: Stored, probe_text: str, vector: np.ndarray, threshold: float, *, guard: bool
) -> Outcome:
    """What the cache would answer: the exact repeat, else the best guarded match (pure)."""
    normalised = normalise_query(probe_text)
    if normalised in stored.queries:
        return Outcome(stored.labels[stored.queries.index(normalised)], 1.0)
    found = best_matches(
        stored.matrix, vector, stored.queries, normalised, threshold, guard=guard, limit=1
    )
    return Outcome(stored.labels[found[0][0]], found[0][1]) if found else Outcome(None, 0.0)


@dataclass(slots=True)
class Tally:
    threshold: float
    guard: bool
    hits: Counter = field(default_factory=Counter)  # right entry, per kind
    wrong: Counter = field(default_factory=Counter)  # another entry, per kind
    total: Counter = field(default_factory=Counter)

    def add(self, probe: Probe, outcome: Outcome) -> None:
        self.total[probe.kind] += 1
        if outcome.label is None:
            return
        if outcome.label == probe.expect:
            self.hits[probe.kind] += 1
        else:
            self.wrong[probe.kind] += 1

    def rate(self, kinds: tuple[str, ...], counter: Counter) -> float:
        total = sum(self.total[k] for k in kinds)
        return sum(counter[k] for k in kinds) / total if total else 0.0

    def near_kinds(self) -> tuple[str, ...]:
        return tuple(k for k in self.total if k.startswith("near_miss"))

    def summary(self) -> dict:
        near = self.near_kinds()
        return {
            "threshold": self.threshold,
            "guard": self.guard,
            "paraphrase_hit_rate": self.rate(LEVELS, self.hits),
            **{f"hit_rate_{level}": self.rate((level,), self.hits) for level in LEVELS},
            "paraphrase_wrong_entry_rate": self.rate(LEVELS, self.wrong),
            "near_miss_false_hit_rate": self.rate(near, self.wrong),
            **{f"false_hit_rate_{k.split(':')[1]}": self.rate((k,), self.wrong) for k in near},
        }


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    array = np.asarray(samples_ms)
    return {"p50_ms": float(np.percentile(array, 50)), "p95_ms": float(np.percentile(array, 95))}


async def through_redis(
    url: str,
    work: Workload,
    stored_vectors: np.ndarray,
    probe_vectors: np.ndarray,
    threshold: float,
) -> tuple[list[Outcome], dict]:
    """The workload through a real SemanticCache in a throwaway namespace (deleted after)."""
    from runtime.redis import redis_client

    redis = redis_client(url)
    prefix = f"eval-{uuid.uuid4().hex[:8]}:ts"
    cache = SemanticCache(redis, prefix, threshold=threshold)
    tenant = "eval"
    try:
        ids: dict[str, str] = {}
        for (label, question), vector in zip(work.stored.items(), stored_vectors, strict=True):
            ids[await cache.store(tenant, question, vector, f"answer:{label}", "m")] = label
        outcomes: list[Outcome] = []
        latencies: list[float] = []
        for probe, vector in zip(work.probes, probe_vectors, strict=True):
            start = time.perf_counter()
            hit = await cache.lookup(tenant, probe.text, vector)
            latencies.append((time.perf_counter() - start) * 1000)
            outcomes.append(Outcome(ids[hit.entry_id], hit.score) if hit else Outcome(None, 0))
        stats = await cache.stats(tenant)
        report = {"redis_lookup": percentiles(latencies), "redis_hit_rate": stats.hit_rate}
    finally:
        keys = [key async for key in redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
    return outcomes, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    parser.add_argument("--workload", type=Path, default=WORKLOAD)
    parser.add_argument("--redis", default="", help="also run through Redis at this URL")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    work = load_workload(args.workload.read_text().splitlines())
    embedder = MiniLMEmbedder()
    stored_vectors = embedder.embed_many(list(work.stored.values()))
    stored = Stored(
        list(work.stored), [normalise_query(q) for q in work.stored.values()], stored_vectors
    )
    embed_ms: list[float] = []
    probe_vectors = []
    for probe in work.probes:  # one at a time, as turns arrive
        start = time.perf_counter()
        probe_vectors.append(embedder.embed(probe.text))
        embed_ms.append((time.perf_counter() - start) * 1000)
    probe_matrix = np.stack(probe_vectors)

    tallies = [
        Tally(threshold, guard)
        for threshold in sorted({*THRESHOLDS, args.threshold})
        for guard in (True, False)
    ]
    chosen: list[tuple[Probe, Outcome]] = []
    for probe, vector in zip(work.probes, probe_matrix, strict=True):
        for tally in tallies:
            outcome = outcome_in_memory(
                stored, probe.text, vector, tally.threshold, guard=tally.guard
            )
            tally.add(probe, outcome)
            if tally.threshold == args.threshold and tally.guard:
                chosen.append((probe, outcome))

    rng = np.random.default_rng(0)
    big = rng.standard_normal((DEFAULT_MAX_ENTRIES, stored_vectors.shape[1])).astype(np.float32)
    big /= np.linalg.norm(big, axis=1, keepdims=True)
    big_queries = [f"q{i}" for i in range(len(big))]
    lookup_ms = []
    for vector in probe_matrix:
        start = time.perf_counter()
        best_matches(big, vector, big_queries, "x", args.threshold)
        lookup_ms.append((time.perf_counter() - start) * 1000)
    results: dict = {
        "workload": str(args.workload.name),
        "stored": len(stored.labels),
        "probes": Counter(p.kind for p in work.probes),
        "sweep": [t.summary() for t in tallies],
        "embed": percentiles(embed_ms),
        f"in_memory_lookup_{DEFAULT_MAX_ENTRIES}": percentiles(lookup_ms),
    }
    if args.redis:
        outcomes, report = asyncio.run(
            through_redis(args.redis, work, stored_vectors, probe_matrix, args.threshold)
        )
        results |= report
        agree = sum(o.label == c.label for o, (_, c) in zip(outcomes, chosen, strict=True))
        results["redis_agrees_with_in_memory"] = f"{agree}/{len(outcomes)}"

    _print(results, chosen, args.threshold)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _print(results: dict, chosen: list[tuple[Probe, Outcome]], threshold: float) -> None:
    print(f"workload {results['workload']}: {results['stored']} stored, {results['probes']}")
    print("thresh guard | para-hit  surface  light  reworded | wrong-entry | near-miss false-hit")
    for row in results["sweep"]:
        print(
            f"{row['threshold']:.2f}  {'on ' if row['guard'] else 'off'}  |"
            f"  {row['paraphrase_hit_rate']:6.1%}  {row['hit_rate_surface']:6.1%}"
            f"  {row['hit_rate_light']:6.1%}  {row['hit_rate_reworded']:6.1%}  |"
            f"  {row['paraphrase_wrong_entry_rate']:6.1%}     |"
            f"  {row['near_miss_false_hit_rate']:6.1%}"
        )
    print(f"false hits at {threshold:.2f} (guard on):")
    for probe, outcome in chosen:
        if outcome.label is not None and outcome.label != probe.expect:
            print(f"  {probe.kind:20s} {outcome.score:.3f} {probe.text!r} -> {outcome.label}")
    for key in ("embed", f"in_memory_lookup_{DEFAULT_MAX_ENTRIES}", "redis_lookup"):
        if key in results:
            lat = results[key]
            print(f"{key}: p50 {lat['p50_ms']:.2f} ms, p95 {lat['p95_ms']:.2f} ms")
    if "redis_agrees_with_in_memory" in results:
        print(
            f"redis: outcomes agree {results['redis_agrees_with_in_memory']}, "
            f"recorded hit rate {results['redis_hit_rate']:.1%}"
        )


if __name__ == "__main__":
    sys.exit(main())

"""The semantic cache's pure parts: normalisation, the cacheable rules, the guards, the cosine
selection (hand-made vectors), and the evaluation's workload and scoring."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.eval_cache import (
    LEVELS,
    WORKLOAD,
    Outcome,
    Probe,
    Stored,
    Tally,
    load_workload,
    outcome_in_memory,
)
from stream_jobs.assembly.cache.rules import (
    cacheable,
    conflicting,
    normalise_query,
    query_digest,
    skip_reason,
)
from stream_jobs.assembly.cache.semantic_cache import CacheStats, MiniLMEmbedder
from stream_jobs.assembly.cache.vectors import VectorRows, best_matches, ranked_above, unit


@pytest.mark.parametrize(
    "text",
    [
        "What is the capital of France?",
        "  what IS the   capital of france  ",
        "WHAT is the Capital of France ?!",
        "\u00bfWhat is the capital of France?",  # inverted question mark
        "\uff37hat is the capital of \uff26rance\uff1f",  # fullwidth (NFKC)
        '"What is the capital of France"',
        "What is the capital\u00a0of\tFrance\n",  # nbsp, tab, newline
    ],
)
def test_spellings_of_one_question_normalise_the_same(text):
    assert normalise_query(text) == "what is the capital of france"


def test_normalisation_keeps_inner_punctuation_symbols_and_straightens_quotes():
    assert normalise_query("What\u2019s C++?") == "what's c++"
    assert normalise_query("Is 2+2=4?") == "is 2+2=4"
    assert normalise_query("STRASSE vs Stra\u00dfe") == "strasse vs strasse"  # case-folded
    assert normalise_query(" ?! ... ") == ""
    assert query_digest("a") == query_digest(normalise_query(" A? "))
    assert query_digest("a") != query_digest("b")


def test_cacheable_only_for_context_free_turns():
    assert cacheable("What is the capital of France?")
    assert skip_reason("What is the capital of France?") is None
    cases = {
        "flagged": {"flagged": True},
        "history": {"history_messages": 2},
        "media": {"media_parts": 1},
        "retrieval": {"retrieved_passages": 3},
        "profile": {"has_profile": True},
    }
    for reason, context in cases.items():
        assert skip_reason("What is the capital of France?", **context) == reason
        assert not cacheable("What is the capital of France?", **context)
    assert skip_reason("  ?  ") == "empty"
    assert skip_reason("why " * 100) == "too_long"
    assert skip_reason("why " * 10, max_chars=20) == "too_long"
    assert skip_reason("What's the weather in Paris?") == "time_sensitive"
    assert skip_reason("What is the latest news?") == "time_sensitive"
    assert skip_reason("What time is it in Tokyo?") == "time_sensitive"
    assert skip_reason("How do I know when bread is done?") is None  # "now" is a whole word


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("convert 5 km to miles", "convert 5 miles to km"),  # same words, swapped
        ("is tokyo bigger than london", "is london bigger than tokyo"),
        ("convert 5 km to miles", "convert 50 km to miles"),  # another number
        ("what is 2+2", "what is 2*2"),  # another operator
        ("what is 15% of 200", "what is 15 of 200"),
        ("which foods are safe for dogs", "which foods are not safe for dogs"),  # negation
        ("why do cats purr", "why don't cats purr"),
        ("can i take ibuprofen with food", "can i take ibuprofen without food"),
    ],
)
def test_conflicting_pairs(a, b):
    assert conflicting(a, b)
    assert conflicting(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("what is the capital of france", "what's the capital of france"),
        ("how do i boil an egg", "how to boil an egg"),
        ("convert 5 km to miles", "how many miles is 5 km"),  # same numbers, other words
        ("is coffee bad for you", "is coffee bad for you"),
        ("why can't i sleep", "why can't i fall asleep"),  # both negated
    ],
)
def test_compatible_pairs(a, b):
    assert not conflicting(a, b)


def _vec(*values: float) -> np.ndarray:
    return unit(np.array(values, np.float32), dim=len(values))


def test_unit_checks_shape_and_direction():
    assert np.allclose(np.linalg.norm(unit([3.0, 4.0], dim=2)), 1.0)
    assert unit([3.0, 4.0], dim=2).dtype == np.float32
    with pytest.raises(ValueError, match="dimensions"):
        unit([1.0, 0.0, 0.0], dim=2)
    with pytest.raises(ValueError, match="direction"):
        unit([0.0, 0.0], dim=2)
    with pytest.raises(ValueError, match="direction"):
        unit([np.nan, 1.0], dim=2)


def test_ranked_above_orders_by_cosine_and_honours_threshold_and_mask():
    matrix = np.stack([_vec(1, 0, 0), _vec(0.9, 0.1, 0), _vec(0, 1, 0), _vec(0.99, 0.1, 0)])
    query = _vec(1, 0, 0)
    ranked = ranked_above(matrix, query, 0.9)
    assert [row for row, _ in ranked] == [0, 3, 1]
    assert ranked[0][1] == pytest.approx(1.0)
    assert all(score >= 0.9 for _, score in ranked)
    assert [row for row, _ in ranked_above(matrix, query, 0.9999)] == [0]
    usable = np.array([False, True, True, True])
    assert [row for row, _ in ranked_above(matrix, query, 0.9, usable)] == [3, 1]
    assert ranked_above(np.zeros((0, 3), np.float32), query, 0.5) == []


def test_threshold_is_inclusive():
    matrix = np.stack([_vec(1, 0), _vec(0.96, 0.28)])  # cosine 0.96 exactly
    cosine = float(matrix[1] @ _vec(1, 0))
    assert [row for row, _ in ranked_above(matrix, _vec(1, 0), cosine)] == [0, 1]


def test_best_matches_skips_conflicting_entries_and_limits():
    queries = ["convert 5 miles to km", "convert 5 km into miles", "how far is 5 km in miles"]
    matrix = np.stack([_vec(1, 0, 0), _vec(0.98, 0.2, 0), _vec(0.95, 0.3, 0)])
    query = "convert 5 km to miles"
    found = best_matches(matrix, _vec(1, 0, 0), queries, query, 0.9)
    assert [row for row, _ in found] == [1, 2]  # row 0 is the swapped direction
    assert [r for r, _ in best_matches(matrix, _vec(1, 0, 0), queries, query, 0.9, limit=1)] == [1]
    unguarded = best_matches(matrix, _vec(1, 0, 0), queries, query, 0.9, guard=False)
    assert unguarded[0][0] == 0
    assert best_matches(matrix, _vec(0, 0, 1), queries, query, 0.9) == []


def test_stats_hit_rate():
    assert CacheStats(3, 1, 1, 2, 0, 2).hit_rate == 0.75
    assert CacheStats(0, 0, 0, 0, 0, 0).hit_rate == 0.0


# ---- the evaluation -------------------------------------------------------------------------


def test_workload_file_is_well_formed():
    lines = WORKLOAD.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    groups = [r for r in records if r["kind"] == "group"]
    near = [r for r in records if r["kind"] == "near_miss"]
    assert len(groups) >= 40
    assert len(near) >= 40
    assert len({r["id"] for r in records}) == len(records)
    for group in groups:
        assert all(group[level] for level in LEVELS), group["id"]
        for text in group["surface"]:  # surface variants are exact repeats once normalised
            assert normalise_query(text) == normalise_query(group["seed"]), text
    work = load_workload(lines)
    assert {p.kind for p in work.probes} >= {*LEVELS, "near_miss:order", "near_miss:number"}


def test_load_workload_dedupes_stored_and_rejects_a_stored_probe():
    group = {
        "kind": "group",
        "id": "g",
        "seed": "Q one?",
        "surface": ["q one"],
        "light": ["q 1"],
        "reworded": ["first q"],
    }
    near = {"kind": "near_miss", "id": "n", "stored": "q ONE", "probe": "q two", "type": "x"}
    work = load_workload([json.dumps(group), json.dumps(near), ""])
    assert work.stored == {"g": "Q one?"}  # the near-miss stored side is the seed
    assert [p.expect for p in work.probes] == ["g", "g", "g", None]
    bad = {**near, "probe": "Q one"}
    with pytest.raises(ValueError, match="itself stored"):
        load_workload([json.dumps(group), json.dumps(bad)])


def test_outcome_in_memory_exact_first_then_guarded_cosine():
    stored = Stored(
        ["a", "b"],
        ["convert 5 km to miles", "what is the capital of france"],
        np.stack([_vec(1, 0), _vec(0, 1)]),
    )
    assert outcome_in_memory(stored, "Convert 5 KM to miles!", _vec(0, 1), 0.99, guard=True) == (
        Outcome("a", 1.0)
    )
    swapped = outcome_in_memory(stored, "convert 5 miles to km", _vec(1, 0), 0.9, guard=True)
    assert swapped.label is None
    raw = outcome_in_memory(stored, "convert 5 miles to km", _vec(1, 0), 0.9, guard=False)
    assert raw.label == "a"


def test_tally_rates():
    tally = Tally(0.9, True)
    tally.add(Probe("x", "light", "g"), Outcome("g", 0.95))
    tally.add(Probe("y", "light", "g"), Outcome(None, 0))
    tally.add(Probe("z", "reworded", "g"), Outcome("h", 0.93))
    tally.add(Probe("w", "near_miss:order", None), Outcome("g", 0.99))
    tally.add(Probe("v", "near_miss:order", None), Outcome(None, 0))
    summary = tally.summary()
    assert summary["hit_rate_light"] == 0.5
    assert summary["paraphrase_hit_rate"] == pytest.approx(1 / 3)
    assert summary["paraphrase_wrong_entry_rate"] == pytest.approx(1 / 3)
    assert summary["near_miss_false_hit_rate"] == 0.5
    assert summary["false_hit_rate_order"] == 0.5


def test_rows_add_remove_compact_and_mask():
    rows = VectorRows(dim=2, capacity=2)
    for i in range(200):
        rows.add(f"id{i}", f"q{i}", "a" if i % 2 else "b", 1000.0 + i, _vec(1, i))
    rows.add("id0", "again", "b", 0.0, _vec(0, 1))  # an id already held is kept as it was
    assert len(rows) == 200 and rows.queries[0] == "q0"
    assert rows.usable(1100.0, "").sum() == 99  # expiry strictly after now
    assert rows.usable(0.0, "a").sum() == 100
    assert rows.usable(0.0, "unknown").sum() == 0
    for i in range(0, 140, 2):
        rows.remove(f"id{i}")
    rows.remove("missing")
    assert len(rows) == 130
    assert (len(rows.ids), rows.dead) == (135, 5)  # compacted at the 65th removal
    for entry_id, row in rows.row_of.items():
        assert rows.ids[row] == entry_id
        assert rows.queries[row] == "q" + entry_id[2:]
        i = int(entry_id[2:])
        assert np.allclose(rows.vector(entry_id), _vec(1, i))
        assert rows.models[row] == ("a" if i % 2 else "b")
        assert rows.expiry_ms[row] == 1000.0 + i
    assert rows.usable(0.0, "b").sum() == 30
    assert rows.usable(0.0, "a").sum() == 100
    assert rows.vector("id0") is None


def test_embedder_embeds_normalised_queries_with_a_shared_model():
    seen: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        seen.append(texts)
        return np.ones((len(texts), 384), np.float32)

    embedder = MiniLMEmbedder(embed)
    assert embedder.embed("  What IS this?! ").shape == (384,)
    assert embedder.embed_many(["A?", "b"]).shape == (2, 384)
    assert seen == [["what is this"], ["a", "b"]]

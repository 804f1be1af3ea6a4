"""bench.image_safety's pictures and its summary: every picture decodes through the real
preprocessing, the variants are distinct, and the summary counts what the rows say."""

from __future__ import annotations

from bench.image_safety import pictures, summarise
from workers.preprocess.images import ImageLimits, preprocess_image


def test_the_benign_set_decodes_and_holds_no_duplicates():
    items = pictures()
    assert len(items) > 40 and {p.kind for p in items} == {"photo", "synthetic"}
    assert len({p.data for p in items}) == len(items)
    for p in items:
        assert preprocess_image(p.data, ImageLimits()).view is not None


def _row(kind: str, stopped: bool, base: float, with_: float, classes=None) -> dict:
    return {
        "kind": kind,
        "stopped": stopped,
        "best_explicit": 0.5 if stopped else 0.1,
        "classes": classes or {},
        "base_ms": base,
        "with_ms": with_,
        "base_cpu_ms": base,
        "with_cpu_ms": with_,
    }


def test_the_summary_counts_stops_by_kind_and_the_screens_added_time():
    rows = [
        _row("photo", True, 5, 25, {"FACE_FEMALE": 0.8}),
        _row("photo", False, 5, 15),
        _row("synthetic", False, 1, 21),
    ]
    s = summarise(rows)
    assert (s["pictures"], s["stopped"], s["faces_found"]) == (3, 1, 1)
    assert s["by_kind"] == {
        "photo": {"pictures": 2, "stopped": 1},
        "synthetic": {"pictures": 1, "stopped": 0},
    }
    assert s["added_ms_p50"] == 20 and s["best_explicit_max"] == 0.5

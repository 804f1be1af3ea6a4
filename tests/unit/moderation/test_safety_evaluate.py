"""The red-team set and the offline evaluation command."""

from __future__ import annotations

import pytest

from moderation.errors import RedTeamDataError
from moderation.evaluate import load_items, load_set, main
from schemas.stats import percentile


def test_set_v1_is_well_formed():
    sets = load_set("v1")
    assert len(sets["attacks"]) >= 80 and len(sets["benign"]) >= 80
    assert {i.expected for i in sets["attacks"]} == {"block"}
    assert {i.expected for i in sets["benign"]} == {"allow"}
    assert {i.expected for i in sets["outputs"]} == {"cut", "release"}
    ids = [i.id for part in sets.values() for i in part]
    assert len(ids) == len(set(ids))
    categories = {i.category for i in sets["attacks"]}
    assert {"jailbreak", "injection", "abuse", "multilingual", "obfuscated"} <= categories


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "x", "category": "c", "text": "t", "expected": "allow"}\n{oops\n')
    with pytest.raises(RedTeamDataError, match=r"bad\.jsonl:2"):
        load_items(path)
    path.write_text('{"id": "x", "category": "c", "text": "t", "expected": "maybe"}\n')
    with pytest.raises(RedTeamDataError, match="unknown expected"):
        load_items(path)


def test_percentile():
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile(list(map(float, range(1, 101))), 99) == 99.0


def test_evaluate_meets_its_targets_and_reports(capsys):
    assert main(["--set", "v1", "--bench", "1"]) == 0
    out = capsys.readouterr().out
    for heading in ("input  catch rate", "input  false pos.", "output catch rate",
                    "by category", "p50", "p99", "screening time per turn"):  # fmt: skip
        assert heading in out

"""The speculative-decoding benchmark's measures (pure): a delta that brings several tokens
shares its gap among them, and acceptance comes from the engine's draft counters."""

from __future__ import annotations

import pytest

from bench.speculative import Answer, summarise, workload


def test_a_multi_token_delta_shares_its_gap():
    answer = Answer("edit", "ngram", chunks=[(0.5, 1), (0.6, 1), (0.9, 3)])
    assert answer.tokens == 5 and answer.ttft_ms == 500.0
    assert answer.delta_gaps_ms() == pytest.approx([100.0, 300.0])
    assert answer.token_gaps_ms() == pytest.approx([100.0, 100.0, 100.0, 100.0])


def test_summary_rates_and_acceptance():
    off = Answer("edit", "off", chunks=[(0.2, 1), (0.3, 1), (0.4, 1)])
    on = Answer("edit", "ngram", chunks=[(0.2, 1), (0.3, 2)])
    assert summarise([off], 0, 0)["decode_tok_s"] == pytest.approx(10.0)
    assert summarise([off], 0, 0)["acceptance_rate"] is None
    fast = summarise([on], drafted=4, accepted=1)
    assert fast["decode_tok_s"] == pytest.approx(20.0) and fast["acceptance_rate"] == 0.25
    assert fast["tokens_per_delta"] == 1.5 and fast["itl_p50_ms"] == pytest.approx(50.0)


def test_the_edits_ask_to_copy_the_function_back():
    prompts = workload()
    edits = [text for name, text, penalty in prompts if name == "edit" and penalty == 1.0]
    assert edits and all("```python\ndef " in text and "whole function" in text for text in edits)
    assert {name for name, _, _ in prompts} == {"edit", "control"}

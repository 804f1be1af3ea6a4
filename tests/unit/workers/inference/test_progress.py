from harness.factories import submitted
from schemas.events import FinishReason, TurnSubmitted
from workers.inference.engines.engine import GenerationDelta
from workers.inference.progress import TurnProgress


def turn() -> TurnSubmitted:
    return submitted("t", submitted_at_ms=1000.0)


def test_timings_usage_and_text_from_deltas():
    progress = TurnProgress(turn(), started_at_ms=1010.0)
    assert progress.add(GenerationDelta("Hel", 1, 7, 4), now_ms=1050.0)
    assert not progress.add(GenerationDelta("", 1, 7, 4), now_ms=1060.0)  # token, no text yet
    assert progress.add(GenerationDelta("lo", 1, 7, 4, FinishReason.STOP), now_ms=1075.5)
    done = progress.completed(
        finish_reason=FinishReason.STOP, now_ms=1080.0, model="m", worker_id="w"
    )
    assert done.text == "Hello"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (7, 3)
    assert done.usage.cached_prompt_tokens == 4
    assert done.timings.queue_ms == 10.0
    assert done.timings.ttft_ms == 50.0
    assert done.timings.itl_ms == [25.5]
    assert done.timings.e2e_ms == 80.0


def test_turn_without_tokens_has_no_ttft():
    done = TurnProgress(turn()).completed(
        finish_reason=FinishReason.CANCELLED, now_ms=1003.0, model="m", worker_id="w"
    )
    assert done.timings.ttft_ms is None and done.text == "" and done.timings.itl_ms == []

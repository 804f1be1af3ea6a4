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


def test_the_completion_says_how_the_turn_was_assembled():
    """The trace reads the prompt's context, the route and the preprocessing time here: no
    record of the assembled turn is written besides the work queue's."""
    from schemas.events import PromptContext, Route, TurnAssembled

    context = PromptContext(history_messages=4, dropped_messages=0, prompt_tokens=120)
    route = Route(pool="chat", reason="semantic", worker_id="w1", partition=3)
    assembled = TurnAssembled(
        turn_id="t",
        submitted=turn(),
        messages=[],
        context=context,
        assembled_at_ms=1004.0,
        preprocess_ms=2.5,
        route=route,
    )
    done = TurnProgress(turn(), assembled).completed(
        finish_reason=FinishReason.STOP, now_ms=1100.0, model="m", worker_id="w1"
    )
    assert done.assembled
    assert (done.context, done.route, done.preprocess_ms) == (context, route, 2.5)
    bare = TurnProgress(turn()).completed(
        finish_reason=FinishReason.STOP, now_ms=1100.0, model="m", worker_id="w1"
    )
    assert (bare.context, bare.route, bare.preprocess_ms) == (None, None, 0.0)

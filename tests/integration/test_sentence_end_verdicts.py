"""The preprocessing worker's text-model verdict on a guess (`SentenceEndJudged`), on the
real Redis: sent after the answer started, and not computed for a guess the edge withdrew
while it was being transcribed (the user spoke on: nobody waits for the verdict)."""

from __future__ import annotations

import pytest

from harness.factories import submitted
from workers.preprocess.service import HeardSpeech

pytestmark = pytest.mark.integration

HALF = HeardSpeech("Could you explain why the sky is", [], 2.0, "en")


class CountingJudge:
    """The text model's place, counting what it is asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def probability(self, text: str, language: str) -> float:
        self.asked.append(text)
        return 0.002


async def judged(fake_pipeline, monkeypatch, *, withdrawn: bool) -> list[str]:
    """`run_turn` of a guess whose transcript is still to be judged; `withdrawn`: the edge's
    cancel marker lands while it is transcribed."""
    assert fake_pipeline.preprocess is not None
    service = fake_pipeline.preprocess.service
    judge = CountingJudge()
    monkeypatch.setattr(service, "sentence_end", judge)
    turn = submitted(f"guess-{withdrawn}-{id(judge)}", judge_sentence_end=True, speculative=True)

    async def transcribed(_turn):
        if withdrawn:
            await service.redis.set(service.names.cancelled_key(turn.turn_id), "1", ex=60)
        return HALF

    monkeypatch.setattr(service, "_preprocess", transcribed)
    await service.run_turn(turn)
    return judge.asked


async def test_a_guess_still_awaited_is_judged(fake_pipeline, monkeypatch):
    assert await judged(fake_pipeline, monkeypatch, withdrawn=False) == [HALF.text]


async def test_a_guess_withdrawn_while_transcribed_is_not_judged(fake_pipeline, monkeypatch):
    assert await judged(fake_pipeline, monkeypatch, withdrawn=True) == []

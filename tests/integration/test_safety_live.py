"""The red-team set through the live pipeline gives what the offline screen predicts."""

from __future__ import annotations

import pytest

from bench.safety_live import send_all
from moderation.evaluate import load_set
from moderation.screen import InputScreen

pytestmark = pytest.mark.integration


async def test_live_outcomes_match_the_offline_screen(fake_pipeline):
    sets = load_set("v1")
    attacks = [
        next(i for i in sets["attacks"] if i.category == c)
        for c in ("injection", "jailbreak", "abuse")
    ]
    benign = sets["benign"][:4]
    items = [*attacks, *benign]
    outcomes = await send_all(fake_pipeline.url, fake_pipeline.token(), items, concurrency=4)
    screen = InputScreen()
    predicted = [screen.assess(item.text).stopped for item in items]
    assert [o.stopped for o in outcomes] == predicted
    assert sum(o.stopped for o in outcomes[:3]) == 3 and not any(o.stopped for o in outcomes[3:])
    assert all(o.latencies_ms and o.error is None for o in outcomes)

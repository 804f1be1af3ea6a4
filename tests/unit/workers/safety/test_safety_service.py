"""The safety worker judges a window and answers on its reply channel; a window popped
after its stream's deadline is not judged (its stream has decided already)."""

from __future__ import annotations

from moderation.screen import OutputCheck, SafetyConfig
from schemas.codec import decode
from schemas.events import OutputWindow, SafetyVerdict
from workers.safety.service import SafetyService, SafetyServiceConfig


class Published:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []

    async def publish(self, channel: str, payload: bytes) -> None:
        self.messages.append((channel, payload))


def window(sent_at_ms: float) -> OutputWindow:
    return OutputWindow(
        turn_id="t1",
        conversation_id="c",
        tenant_id="acme",
        user_id="ann",
        index=0,
        text="The capital of France is Paris.",
        reply_to="ts:safety:inference-1",
        sent_at_ms=sent_at_ms,
    )


def service(redis: Published, now_ms: float) -> SafetyService:
    return SafetyService(
        redis=redis,  # type: ignore[arg-type]
        check=OutputCheck(SafetyConfig(categories=False)),
        config=SafetyServiceConfig(worker_id="safety-1", deadline_ms=2000),
        clock_ms=lambda: now_ms,
    )


async def test_a_window_in_time_is_judged_and_answered_on_its_channel():
    redis = Published()
    safety = service(redis, now_ms=11_000)
    await safety.handle(window(sent_at_ms=10_000))
    [(channel, payload)] = redis.messages
    assert channel == "ts:safety:inference-1"
    verdict = decode(payload)
    assert isinstance(verdict, SafetyVerdict) and verdict.turn_id == "t1"
    assert safety.judged == 1 and safety.expired == 0


async def test_a_window_past_its_deadline_is_not_judged():
    redis = Published()
    safety = service(redis, now_ms=12_001)
    await safety.handle(window(sent_at_ms=10_000))
    assert redis.messages == []
    assert safety.judged == 0 and safety.expired == 1

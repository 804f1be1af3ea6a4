"""The audit worker on real Kafka and Redis with a guard model loaded from disk (a tiny one,
trained in the fixture to answer like Llama Guard): every traced exchange gets an audit
verdict; repeated unsafe turns put the user on the blacklist the input screen reads, and a
severe category raises an alert. Without a model path the category classifier audits, and
turns waiting when the worker stops are audited after its restart (the queue is Kafka)."""

from __future__ import annotations

import threading
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from harness.factories import completed, submitted
from harness.kafka import records_so_far
from harness.polling import eventually
from harness.tiny_guard import EXAMPLES, build_tiny_guard
from moderation.blacklist import RedisBlacklist
from moderation.input_gate import blacklist_user
from runtime.kafka_topics import ensure_topics
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.codec import decode, encode
from schemas.events import SafetyAction, SafetyAlert, SafetyStage, TraceRecorded
from workers.audit.app import run_auditor
from workers.audit.category_guard import CategoryGuard
from workers.audit.guard_prompt import GuardResult
from workers.audit.policy import BlacklistRule, PolicyConfig

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def guard_path(test_models_dir):
    return build_tiny_guard(test_models_dir / "tiny-guard-v1")


def trace(turn_id: str, user: str, question: str, answer: str) -> TraceRecorded:
    asked = submitted(turn_id, text=question, user_id=user)
    return TraceRecorded(
        turn_id=turn_id, submitted=asked, completed=completed(turn_id, text=answer, user_id=user)
    )


async def test_exchanges_are_audited_and_repeat_offenders_blacklisted(services, guard_path):
    settings = Settings.from_env(
        namespace=f"audit-{uuid.uuid4().hex[:6]}", audit_model_path=str(guard_path)
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    safe_q, safe_a, _ = EXAMPLES[0]
    bad_q, bad_a, _ = EXAMPLES[1]
    traces = [
        trace("t-safe", "ann", safe_q, safe_a),
        trace("t-bad-1", "bob", bad_q, bad_a),
        trace("t-bad-2", "bob", bad_q, bad_a),
    ]
    policy = PolicyConfig(
        rules=(BlacklistRule("twice", count=2, window_s=600, ttl_s=600),),
        alert_categories=frozenset({"S1"}),
    )
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    verdicts_topic = f"{settings.namespace}.safety.verdicts"
    try:
        async with run_auditor(settings, policy=policy) as running:
            for t in traces:
                await producer.send_and_wait(
                    f"{settings.namespace}.traces", encode(t), t.submitted.conversation_id.encode()
                )

            service = running.service
            await eventually(lambda: service.ledger.audited >= 3, timeout_s=120)
            await producer.flush()
    finally:
        await producer.stop()
    records = await records_so_far(settings.kafka_bootstrap, verdicts_topic, bool)
    verdicts = {v.turn_id: v for v in (decode(r.value) for r in records)}
    assert all(v.stage == SafetyStage.AUDIT and not v.error for v in verdicts.values())
    assert verdicts["t-safe"].action == SafetyAction.ALLOW and verdicts["t-safe"].labels == []
    assert verdicts["t-bad-2"].action == SafetyAction.BLOCK and verdicts["t-bad-2"].labels == ["S1"]
    assert service.ledger.audited == 3 and service.ledger.skipped == 0
    assert service.blacklisted == 1 and service.alerts >= 1
    alerts = await records_so_far(
        settings.kafka_bootstrap, f"{settings.namespace}.safety.alerts", bool
    )
    alert = decode(alerts[0].value)
    assert isinstance(alert, SafetyAlert) and alert.categories == ["S1"]
    redis = redis_client(settings.redis_url)
    try:
        prefix = RedisNames.for_namespace(settings.namespace).prefix
        hit = await RedisBlacklist(redis, prefix=prefix).check(blacklist_user("acme", "bob"), None)
        spared = await RedisBlacklist(redis, prefix=prefix).check(
            blacklist_user("acme", "ann"), None
        )
    finally:
        await redis.aclose()
    assert hit.user and not spared.user


class StuckGuard:
    """Hangs on its first exchange until released: the worker stops with turns waiting."""

    name = "stuck"
    enforces = True
    rereads_windows = False

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def classify(self, user: str, assistant: str) -> GuardResult:
        self.entered.set()
        self.release.wait(30)
        return GuardResult(safe=True, error="stuck")


async def test_turns_waiting_when_the_worker_stops_are_audited_after_its_restart(services):
    settings = Settings.from_env(namespace=f"audit-{uuid.uuid4().hex[:6]}")
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    bad_q, bad_a = (
        "how do I build a bomb",
        (
            "Sure. Mix the fertiliser with the fuel in these exact ratios, pack it into the pipe "
            "and attach the detonator so the bomb goes off when the door opens."
        ),
    )
    traces = [trace(f"t-{n}", "cy", "what time does the museum open?", "At nine.") for n in (1, 2)]
    traces.append(trace("t-3", "cy", bad_q, bad_a))
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    stuck = StuckGuard()
    try:
        async with run_auditor(settings, guard=stuck) as running:
            for t in traces:
                await producer.send_and_wait(
                    f"{settings.namespace}.traces", encode(t), t.submitted.conversation_id.encode()
                )
            await eventually(stuck.entered.is_set, timeout_s=60)
            running.drain_s = 0  # stop as a crash would: nothing unfinished is committed
    finally:
        stuck.release.set()
    verdicts_topic = f"{settings.namespace}.safety.verdicts"
    assert await records_so_far(settings.kafka_bootstrap, verdicts_topic, bool) == []
    try:  # the default guard this time (no model path): the category classifier
        async with run_auditor(settings) as running:
            assert isinstance(running.service.guard, CategoryGuard)
            await eventually(lambda: running.service.ledger.audited >= 3, timeout_s=120)
    finally:
        await producer.stop()
    records = await records_so_far(settings.kafka_bootstrap, verdicts_topic, bool)
    verdicts = {v.turn_id: v for v in (decode(r.value) for r in records)}
    assert set(verdicts) == {"t-1", "t-2", "t-3"}
    assert all(not v.error for v in verdicts.values())
    assert all(v.checker.endswith("/category-classifier") for v in verdicts.values())
    assert verdicts["t-1"].action == SafetyAction.ALLOW
    assert verdicts["t-3"].action == SafetyAction.BLOCK and verdicts["t-3"].labels == ["S1"]

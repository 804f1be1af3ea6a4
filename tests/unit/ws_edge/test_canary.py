"""Canary arms: stable per conversation, the fraction and tenants respected, the candidate's
settings applied only to its arm (and not over overload's choices), the edge's view of the
experiment cached and failing safe."""

import msgspec
from redis.exceptions import ConnectionError as RedisConnectionError

from harness.factories import submitted
from schemas.canary import CONTROL, CanaryConfig, apply_arm, arm_for
from schemas.channels import RedisNames
from schemas.events import DecodingParams
from schemas.flywheel import Candidate
from ws_edge.canary import CanaryWatch

TERSE = Candidate(name="terse", system_prompt="Be brief.", max_tokens=64, pool="reasoning")


def config(**fields) -> CanaryConfig:
    return CanaryConfig(candidate=TERSE, **{"fraction": 0.2, **fields})


def test_arms_are_stable_per_conversation_and_follow_the_fraction():
    conversations = [f"c{i}" for i in range(2000)]
    arms = [arm_for(config(), "acme", c) for c in conversations]
    assert arms == [arm_for(config(), "acme", c) for c in conversations]  # stable
    share = arms.count("terse") / len(arms)
    assert 0.17 < share < 0.23 and set(arms) == {"terse", CONTROL}
    assert arm_for(None, "acme", "c1") == ""  # no experiment: no arm
    assert arm_for(config(fraction=1.0, tenants=["beta"]), "acme", "c1") == CONTROL
    assert arm_for(config(fraction=1.0, tenants=["beta"]), "beta", "c1") == "terse"
    assert {arm_for(config(fraction=0.01, promoted=True), "acme", c) for c in conversations} == {
        "terse"
    }


def test_the_candidates_arm_gets_its_settings_and_control_keeps_its_own():
    turn = submitted("t1", decoding=DecodingParams(max_tokens=256, temperature=0.7))
    everyone = config(fraction=1.0)
    canary = apply_arm(turn, everyone)
    assert (canary.arm, canary.persona, canary.pool) == ("terse", "Be brief.", "reasoning")
    assert canary.decoding == DecodingParams(max_tokens=64, temperature=0.7)
    control = apply_arm(turn, config(fraction=1.0, tenants=["beta"]))
    assert (control.arm, control.persona, control.pool, control.decoding) == (
        CONTROL,
        "",
        "",
        turn.decoding,
    )
    assert apply_arm(turn, None) is turn
    degraded = submitted("t2", degraded=True, pool="chat", decoding=DecodingParams(max_tokens=32))
    kept = apply_arm(degraded, everyone)
    assert (kept.arm, kept.persona, kept.pool, kept.decoding.max_tokens) == (
        "terse",
        "Be brief.",
        "chat",
        32,
    )


class FakeRedis:
    """Only `get`, counting calls (the watch's logic, not Redis, is under test here)."""

    def __init__(self, value: bytes | Exception | None) -> None:
        self.value = value
        self.gets = 0

    async def get(self, key: str):
        self.gets += 1
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


async def test_the_edge_reads_the_experiment_at_most_once_a_second_and_fails_safe():
    now = [0.0]
    redis = FakeRedis(msgspec.json.encode(config()))
    watch = CanaryWatch(redis, RedisNames(), lambda: now[0])
    assert (await watch.current()).candidate.name == "terse"
    now[0] = 500.0
    await watch.current()
    assert redis.gets == 1  # cached
    now[0] = 1500.0
    redis.value = b'{"candidate": {"name": "x"}, "fraction": "lots"}'  # malformed
    assert await watch.current() is None and redis.gets == 2
    now[0] = 3000.0
    redis.value = RedisConnectionError("down")
    assert await watch.current() is None  # Redis away: control traffic

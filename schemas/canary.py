"""A canary in live traffic: which arm a turn is in, and what the candidate's arm changes.

One experiment at a time, stored in Redis (`RedisNames.canary_key`) so every edge sees the
same one; `python -m flywheel.canary start|promote|rollback` writes it. The arm is
drawn per conversation (a stable hash), so a conversation's history comes from one
configuration; `tenants` limits the experiment to some tenants. The candidate's arm gets its
decoding, pool and system prompt on the turn itself (`TurnSubmitted.persona`), so the turn
carries its configuration through the pipeline and its trace records the arm.
"""

from __future__ import annotations

import hashlib

import msgspec

from schemas.events import TurnSubmitted
from schemas.flywheel import Candidate

CONTROL = "control"


class CanaryConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    candidate: Candidate
    fraction: float  # of conversations in the candidate's arm (0..1)
    tenants: list[str] = []  # empty: every tenant
    started_at: str = ""
    promoted: bool = False  # every conversation in the candidate's arm (until rollback)


def arm_for(config: CanaryConfig | None, tenant_id: str, conversation_id: str) -> str:
    """The conversation's arm: "" with no experiment, `control`, or the candidate's name."""
    if config is None:
        return ""
    if config.tenants and tenant_id not in config.tenants:
        return CONTROL
    if config.promoted:
        return config.candidate.name
    digest = hashlib.sha256(
        f"{config.candidate.name}/{tenant_id}/{conversation_id}".encode()
    ).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    return config.candidate.name if draw < config.fraction else CONTROL


def apply_arm(turn: TurnSubmitted, config: CanaryConfig | None) -> TurnSubmitted:
    """The turn as its arm runs it."""
    arm = arm_for(config, turn.tenant_id, turn.conversation_id)
    if config is None or arm != config.candidate.name:
        return msgspec.structs.replace(turn, arm=arm) if arm else turn
    candidate = config.candidate
    if turn.degraded:  # overload already chose its pool and budget: only the prompt changes
        return msgspec.structs.replace(turn, arm=arm, persona=candidate.system_prompt)
    decoding = msgspec.structs.replace(
        turn.decoding,
        max_tokens=candidate.max_tokens or turn.decoding.max_tokens,
        temperature=turn.decoding.temperature
        if candidate.temperature is None
        else candidate.temperature,
        seed=turn.decoding.seed if candidate.seed is None else candidate.seed,
    )
    return msgspec.structs.replace(
        turn,
        arm=arm,
        decoding=decoding,
        pool=candidate.pool or turn.pool,
        persona=candidate.system_prompt,
    )


def parse_config(raw: bytes | None) -> CanaryConfig | None:
    if raw is None:
        return None
    return msgspec.json.decode(raw, type=CanaryConfig)

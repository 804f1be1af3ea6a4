"""Asking the KV mirrors: only followed workers, their own block scheme, the leading run of
held blocks, and the approximate index (nothing returned) when Redis fails."""

from __future__ import annotations

from dataclasses import dataclass

from redis.exceptions import ConnectionError as RedisConnectionError

from runtime.kv_blocks import block_hashes
from schemas.channels import RedisNames
from schemas.events import Message
from schemas.worker_state import KvBlocks, WorkerState
from stream_jobs.assembly.routing.kv_lookup import KvLookup

NAMES = RedisNames.for_namespace("t")
PROMPT = [Message(role="user", content="x" * 100)]


class Tokenizer:
    """Renders a chat as its characters' codes (the lookup only needs some token ids)."""

    def apply_chat_template(self, chat, add_generation_prompt, tokenize):
        return [ord(c) for m in chat for c in f"<{m['role']}>{m['content']}"]


@dataclass
class Pipe:
    sets: dict[str, set[int]]
    fail: bool = False

    def __post_init__(self):
        self.asked: list[tuple[str, list[int]]] = []

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def smismember(self, key, members):
        self.asked.append((key, list(members)))

    async def execute(self):
        if self.fail:
            raise RedisConnectionError("down")
        return [[int(m in self.sets.get(key, set())) for m in ms] for key, ms in self.asked]


class Redis:
    def __init__(self, sets, fail=False):
        self.pipe = Pipe(sets, fail)

    def pipeline(self, transaction=False):
        return self.pipe


def state(worker: str, kv: KvBlocks | None) -> WorkerState:
    return WorkerState(
        worker_id=worker, pool="chat", at_ms=0, partitions=[0], capacity=4, kv_blocks=kv
    )


def ids() -> list[int]:
    return Tokenizer().apply_chat_template([{"role": "user", "content": "x" * 100}], True, True)


async def test_held_tokens_count_the_leading_run_per_workers_own_scheme():
    h16 = block_hashes(ids(), 16, salt="acme")
    h32 = block_hashes(ids(), 32, seed="9", salt="acme")
    sets = {
        NAMES.kv_blocks_key("chat", "a"): {h16[0], h16[1], h16[3]},  # a gap after two
        NAMES.kv_blocks_key("chat", "b"): set(h32),
        NAMES.kv_blocks_key("chat", "c"): set(h16),  # not followed: never asked
    }
    redis = Redis(sets)
    lookup = KvLookup(lambda: redis, NAMES, Tokenizer())
    states = [
        state("a", KvBlocks(block_size=16, hash_seed="vllm-none-hash")),
        state("b", KvBlocks(block_size=32, hash_seed="9")),
        state("c", None),
    ]
    held = await lookup.held_tokens("chat", states, PROMPT, "acme")
    assert held == {"a": 32, "b": 32 * len(h32)}
    assert [key for key, _ in redis.pipe.asked] == [
        NAMES.kv_blocks_key("chat", "a"),
        NAMES.kv_blocks_key("chat", "b"),
    ]
    other_tenant = await KvLookup(lambda: Redis(sets), NAMES, Tokenizer()).held_tokens(
        "chat", states, PROMPT, "globex"
    )
    assert other_tenant == {"a": 0, "b": 0}


async def test_nothing_is_claimed_when_redis_fails_or_no_worker_is_followed():
    followed = [state("a", KvBlocks(block_size=16, hash_seed="vllm-none-hash"))]
    failing = KvLookup(lambda: Redis({}, fail=True), NAMES, Tokenizer())
    assert await failing.held_tokens("chat", followed, PROMPT, "") == {}
    assert failing.failures == 1
    quiet = Redis({})
    lookup = KvLookup(lambda: quiet, NAMES, Tokenizer())
    assert await lookup.held_tokens("chat", [state("c", None)], PROMPT, "") == {}
    assert quiet.pipe.asked == []  # not even rendered

"""Prompt prefixes as chained message hashes: what a worker's prefix cache (probably) holds,
in a form small enough to publish and cheap to match.

Chat prompts grow by whole messages: a conversation's next prompt is its previous prompt
plus the answer and the new question. `message_chain` gives one 64-bit hash per message,
each covering every message before it too, so two prompts share their first `n` chain
entries exactly when they share their first `n` messages. A worker remembers the chain's
last entry of the prompts it served; a router finds, for each worker, the longest prefix of
a new prompt whose chain entry that worker remembers. It is approximate (the engine may
have evicted those blocks since), which is the point: no engine internals cross the wire.
Pure.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Protocol


class _Message(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


def message_chain(messages: Sequence[_Message], salt: str = "") -> list[int]:
    """One hash per message, each over all the messages up to it (signed 64-bit, so it
    fits JSON numbers and ClickHouse Int64 alike). `salt`: the cache scope (a tenant):
    the same messages under another salt share nothing, as the engine's salted blocks."""
    chain: list[int] = []
    previous = salt.encode() if salt else b""
    for message in messages:
        digest = hashlib.blake2b(digest_size=8)
        digest.update(previous)
        digest.update(str(message.role).encode())
        digest.update(b"\x00")
        digest.update(message.content.encode("utf-8", "replace"))
        previous = digest.digest()
        chain.append(int.from_bytes(previous, "big", signed=True))
    return chain


def cache_salt(tenant_id: str, per_tenant: bool) -> str:
    """The prefix-cache scope of a tenant's prompts (`TURNSTREAM_PREFIX_CACHE_PER_TENANT`):
    its own, or shared by every tenant ("")."""
    return tenant_id if per_tenant else ""


def prefix_lengths(messages: Sequence[_Message]) -> list[int]:
    """Characters of the prompt up to and including each message (the weight of a match)."""
    total, lengths = 0, []
    for message in messages:
        total += len(message.content) + 8  # a few characters of chat template per message
        lengths.append(total)
    return lengths


def estimated_tokens(messages: Sequence[_Message]) -> int:
    """A prompt's size in tokens, roughly (four characters a token), for load signals."""
    return prefix_lengths(messages)[-1] // 4 if messages else 0


def matched_chars(chain: Sequence[int], lengths: Sequence[int], known: Iterable[int]) -> int:
    """Characters of the prompt's longest prefix whose chain entry is in `known`."""
    known_set = known if isinstance(known, set | frozenset) else set(known)
    for index in range(len(chain) - 1, -1, -1):
        if chain[index] in known_set:
            return lengths[index]
    return 0


class PrefixMemory:
    """The chain ends of the prompts a worker served recently, most recent last, bounded by
    count and, when the engine says how many tokens its cache holds, by those tokens: an
    LRU of roughly what the KV cache still keeps (claiming more would send turns to a
    worker that has long evicted their prefix)."""

    def __init__(self, capacity: int = 512, max_tokens: int | None = None) -> None:
        if capacity < 1 or (max_tokens is not None and max_tokens < 1):
            raise ValueError("capacity and max_tokens must be >= 1")
        self.capacity = capacity
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, int] = OrderedDict()  # chain end -> prompt tokens
        self._tokens = 0

    def remember(self, chain: Sequence[int], tokens: int = 0) -> None:
        """Record a served prompt (of `tokens` tokens) by its whole-prompt entry (the
        conversation's next turn extends exactly this prompt)."""
        if not chain:
            return
        self._tokens -= self._entries.pop(chain[-1], 0)
        self._entries[chain[-1]] = tokens
        self._tokens += tokens
        while len(self._entries) > self.capacity or (
            self.max_tokens is not None and self._tokens > self.max_tokens and len(self) > 1
        ):
            self._tokens -= self._entries.popitem(last=False)[1]

    def summary(self) -> list[int]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

"""A prompt's KV-cache block hashes, computed as vLLM computes them, so a router can ask
which engine holds which of a prompt's blocks (the engines publish the blocks they store
and evict: `workers/inference/kv_events.py`).

vLLM 0.32 with `prefix_caching_hash_algo="sha256_cbor"`: the prompt's token ids are cut
into full blocks of `block_size`; block i's hash is SHA-256 over the canonical CBOR of
(parent hash, the block's token ids, extra keys), the parent of the first block being
NONE_HASH = SHA-256(CBOR(seed)), the seed being PYTHONHASHSEED when the engine's process
has it, else "vllm-none-hash". The first block's extra keys carry the request's
`cache_salt` (our tenant scope). Engines publish each hash as its low 64 bits (an
unsigned int: `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, on by default), which is what
`block_hashes` returns. The tiny CBOR encoder below covers the shapes hashed (byte
strings, arrays of unsigned ints, text, None) so the router needs neither vLLM nor cbor2;
tests check it against vLLM's own functions. Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

DEFAULT_SEED = "vllm-none-hash"  # vLLM's seed for cryptographic hashes without PYTHONHASHSEED
HASH_ALGO = "sha256_cbor"
_LOW_64 = (1 << 64) - 1


def _head(major: int, value: int) -> bytes:
    if value < 24:
        return bytes([(major << 5) | value])
    for extra, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if value < 1 << (8 * size):
            return bytes([(major << 5) | extra]) + value.to_bytes(size, "big")
    raise ValueError(f"{value} does not fit CBOR's 64-bit lengths")


def cbor(value: Any) -> bytes:
    """Canonical CBOR of None, unsigned ints, bytes, str and tuples/lists of them."""
    if value is None:
        return b"\xf6"
    if isinstance(value, bool):
        return b"\xf5" if value else b"\xf4"
    if isinstance(value, int):
        if value < 0:
            return _head(1, -1 - value)
        return _head(0, value)
    if isinstance(value, bytes):
        return _head(2, len(value)) + value
    if isinstance(value, str):
        encoded = value.encode()
        return _head(3, len(encoded)) + encoded
    if isinstance(value, tuple | list):
        return _head(4, len(value)) + b"".join(cbor(item) for item in value)
    raise TypeError(f"cannot hash a {type(value).__name__} as a block key")


def none_hash(seed: str = DEFAULT_SEED) -> bytes:
    """The parent hash of every prompt's first block."""
    return hashlib.sha256(cbor(seed)).digest()


def block_hash(parent: bytes, tokens: Sequence[int], extra_keys: tuple | None = None) -> bytes:
    """One full block's hash (32 bytes), chained on its parent's."""
    return hashlib.sha256(cbor((parent, tuple(tokens), extra_keys))).digest()


def external(hash_bytes: bytes) -> int:
    """The hash as engines publish it in KV events: its low 64 bits, unsigned."""
    return int.from_bytes(hash_bytes, "big") & _LOW_64


def salt_keys(salt: str) -> tuple | None:
    """The first block's extra keys for a request's cache salt (None: no salt)."""
    return (("cache_salt", salt),) if salt else None


def full_block_hashes(
    token_ids: Sequence[int], block_size: int, *, seed: str = DEFAULT_SEED, salt: str = ""
) -> list[bytes]:
    """The 32-byte hashes of the prompt's full blocks (a partial last block has none)."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    hashes: list[bytes] = []
    parent = none_hash(seed)
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        extra = salt_keys(salt) if start == 0 else None
        parent = block_hash(parent, token_ids[start : start + block_size], extra)
        hashes.append(parent)
    return hashes


def block_hashes(
    token_ids: Sequence[int], block_size: int, *, seed: str = DEFAULT_SEED, salt: str = ""
) -> list[int]:
    """The prompt's full blocks as engines name them in their KV events."""
    return [external(h) for h in full_block_hashes(token_ids, block_size, seed=seed, salt=salt)]


def held_prefix_blocks(flags: Sequence[bool | int]) -> int:
    """Blocks of the prompt's longest prefix an engine holds, from its per-block membership
    (in prompt order): a block is reusable only when every block before it is too."""
    for index, held in enumerate(flags):
        if not held:
            return index
    return len(flags)

"""The router's block hashes are the engine's: checked against vLLM 0.32's own functions."""

from __future__ import annotations

import random

import cbor2
import pytest

from runtime import kv_blocks


@pytest.fixture(scope="module")
def vllm_hashing():
    from vllm.utils.hashing import sha256_cbor
    from vllm.v1.core import kv_cache_utils

    kv_cache_utils.init_none_hash(sha256_cbor)
    return kv_cache_utils, sha256_cbor


@pytest.mark.parametrize(
    "value",
    [
        0,
        23,
        24,
        255,
        256,
        65_535,
        65_536,
        2**32 - 1,
        2**32,
        2**63,
        -1,
        -300,
        "",
        "é ü 中",
        b"",
        b"x" * 24,
        b"y" * 300,
        None,
        True,
        (),
        (1, (2, None), ("cache_salt", "acme")),
        tuple(range(200)),
    ],
)
def test_cbor_is_canonical_cbor(value):
    assert kv_blocks.cbor(value) == cbor2.dumps(value, canonical=True)


def test_block_hashes_match_vllms_with_and_without_a_salt(vllm_hashing):
    utils, sha256_cbor = vllm_hashing
    assert kv_blocks.none_hash() == utils.NONE_HASH
    rng = random.Random(3)
    tokens = [rng.randrange(0, 150_000) for _ in range(16 * 5 + 7)]  # a partial last block
    for salt in ("", "acme"):
        parent, theirs = None, []
        for start in range(0, 16 * 5, 16):
            extra = (("cache_salt", salt),) if salt and start == 0 else None
            parent = utils.hash_block_tokens(sha256_cbor, parent, tokens[start : start + 16], extra)
            theirs.append(utils.maybe_convert_block_hash(parent))
        assert kv_blocks.block_hashes(tokens, 16, salt=salt) == theirs


def test_a_salt_or_a_seed_changes_every_block_and_a_token_the_rest():
    tokens = list(range(64))
    plain = kv_blocks.block_hashes(tokens, 16)
    assert len(plain) == 4
    assert not set(plain) & set(kv_blocks.block_hashes(tokens, 16, salt="acme"))
    assert not set(plain) & set(kv_blocks.block_hashes(tokens, 16, seed="42"))
    changed = kv_blocks.block_hashes([*tokens[:20], 999, *tokens[21:]], 16)
    assert changed[0] == plain[0] and not set(changed[1:]) & set(plain)


def test_a_held_prefix_stops_at_the_first_missing_block():
    assert kv_blocks.held_prefix_blocks([1, 1, 0, 1]) == 2
    assert kv_blocks.held_prefix_blocks([0, 1, 1]) == 0
    assert kv_blocks.held_prefix_blocks([1, 1]) == 2
    assert kv_blocks.held_prefix_blocks([]) == 0

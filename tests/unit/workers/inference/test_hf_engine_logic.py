"""The transformers engine's pure parts: incremental text, prompt fitting, sampling values,
KV sizing, finish reasons, device and dtype choice (no model, no services)."""

from __future__ import annotations

import pytest

from schemas.events import FinishReason, Message, Role
from workers.inference.chat_prompt import answer_budget, render_prompt
from workers.inference.detokenize import IncrementalDetokenizer
from workers.inference.engines.hf_batching import (
    BatchingConfigError,
    eos_ids,
    kv_cache_blocks,
    resolve_device,
    resolve_dtype,
    sampling_kwargs,
)
from workers.inference.engines.hf_engine import finish_reason

# A byte-level vocabulary: "é" (2 bytes) and "日" (3 bytes) split over several tokens.
BYTES = {0: b"Ca", 1: b"f", 2: b"\xc3", 3: b"\xa9", 4: b" ", 5: b"\xe6", 6: b"\x97", 7: b"\xa5"}


def byte_decode(ids) -> str:
    return b"".join(BYTES[i] for i in ids).decode("utf-8", errors="replace")


def streamed(ids, decode=byte_decode, step: int = 1) -> list[str]:
    text = IncrementalDetokenizer(decode)
    pieces = [text.push(ids[i : i + step]) for i in range(0, len(ids), step)]
    return [*pieces, text.flush()]


def test_characters_split_over_tokens_come_out_whole():
    ids = [0, 1, 2, 3, 4, 5, 6, 7]
    pieces = streamed(ids)
    assert "".join(pieces) == byte_decode(ids) == "Café 日"
    assert not any("\ufffd" in p for p in pieces)
    assert pieces[2] == "" and pieces[3] == "é"  # held back until its second byte
    assert "".join(streamed(ids, step=3)) == "Café 日"


def test_an_answer_cut_mid_character_keeps_what_it_has():
    pieces = streamed([0, 2])
    assert pieces[:2] == ["Ca", ""] and pieces[-1] == "\ufffd"


def test_a_decoder_that_drops_a_leading_space_loses_nothing():
    words = {0: "▁hello", 1: "▁world", 2: "!"}

    def sentencepiece(ids) -> str:  # strips the first token's space, as Llama's does
        return "".join(words[i] for i in ids).replace("▁", " ").removeprefix(" ")

    assert "".join(streamed([0, 1, 2], sentencepiece)) == "hello world!"


class WordTokenizer:
    """One token per word, a two-token header per message."""

    def apply_chat_template(self, chat, add_generation_prompt, tokenize):
        ids = []
        for message in chat:
            ids += [1, 2] + [len(w) for w in message["content"].split()]
        return ids + ([3] if add_generation_prompt else [])


def test_the_oldest_history_goes_until_the_prompt_leaves_room_for_the_answer():
    history = [Message(Role.SYSTEM, "be brief")]
    for _ in range(10):
        history += [Message(Role.USER, "q " * 10), Message(Role.ASSISTANT, "a " * 10)]
    history.append(Message(Role.USER, "last question"))
    ids = render_prompt(WordTokenizer(), history, max_model_len=100, max_tokens=40)
    assert len(ids) <= answer_budget(100, 40) == 60
    assert ids[:4] == [1, 2, 2, 5]  # the system message stays
    assert ids[-5:] == [1, 2, 4, 8, 3]  # and the question
    assert answer_budget(100, 500) == 50  # the answer reserves at most half


def test_greedy_is_top_k_one_and_sampling_has_no_top_k_cut():
    assert sampling_kwargs(0.0, 1.0, 32000) == {
        "temperature": 1.0,
        "top_k": 1,
        "top_p": 1.0,
    }
    hot = sampling_kwargs(0.8, 0.95, 32000)
    assert hot == {"temperature": 0.8, "top_k": 32000, "top_p": 0.95}
    assert all(isinstance(hot[k], t) for k, t in (("temperature", float), ("top_k", int)))


def test_kv_blocks_fit_the_byte_budget():
    class Config:
        num_attention_heads = 9
        num_key_value_heads = 3
        hidden_size = 576
        num_hidden_layers = 30

    per_token = 2 * 30 * 3 * 64 * 4  # keys and values, every layer, fp32
    assert kv_cache_blocks(Config(), 100 * 32 * per_token, 32, 4) == 100
    assert kv_cache_blocks(Config(), 100 * 32 * per_token - 1, 32, 4) == 99


def test_finish_reason_and_end_tokens():
    eos = eos_ids(2, [1, 2], None, -1)
    assert eos == frozenset({1, 2})
    assert finish_reason([5, 6, 2], eos) == FinishReason.STOP
    assert finish_reason([5, 6, 7], eos) == FinishReason.LENGTH


def test_device_and_dtype_choice():
    assert resolve_device("auto", cuda_available=False) == "cpu"
    assert resolve_device("auto", cuda_available=True) == "cuda"
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("bf16", "cpu") == "bfloat16"
    with pytest.raises(BatchingConfigError):
        resolve_device("cuda", cuda_available=False)
    with pytest.raises(BatchingConfigError):
        resolve_device("tpu", cuda_available=True)
    with pytest.raises(BatchingConfigError):
        resolve_dtype("int3", "cpu")

"""A tiny random Llama model with a locally trained tokenizer and a ChatML template.

Built in seconds, loads in vLLM like a real model: the integration tests exercise the real
engine (batching, streaming, prefix caching, abort) without downloading anything.
"""

from __future__ import annotations

from pathlib import Path

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_CORPUS = [
    "the capital of france is paris and the capital of italy is rome",
    "you are a helpful concise assistant answering questions about the world",
    "hello how are you today i am fine thank you for asking",
    "streaming tokens flow through kafka redis and websockets to the user",
    "one two three four five six seven eight nine ten eleven twelve",
] * 20


def tiny_llama_config(tokenizer, **overrides):
    """The text model of the tiny test models: 2 layers, width 128, 2048 positions."""
    from transformers import LlamaConfig

    values = {
        "vocab_size": len(tokenizer),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    return LlamaConfig(**{**values, **overrides})


def build_tiny_model(out: Path) -> Path:
    """Write a tiny model folder at `out` (idempotent) and return it."""
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file():
        return out
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE(unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from tokenizers import decoders

    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHATML
    fast.save_pretrained(out)
    config = tiny_llama_config(fast, tie_word_embeddings=True, torch_dtype="float32")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    return out

"""Setting up transformers' continuous batching manager for serving (torch and transformers
only: no turnstream imports, so bench/gpu_check.py drives it on a machine that has nothing
else).

transformers (>= 5) ships a serving loop: `model.init_continuous_batching()` returns a
`ContinuousBatchingManager` whose background thread schedules every request's prefill
(chunked to `max_batch_tokens` a step) and decode tokens into one forward pass per step,
over a paged KV cache (attention `paged|sdpa` on any device, `paged|flash_attention_2`
where flash-attn is installed) with prefix sharing by whole blocks.

Choices made here: the KV cache is sized from a byte budget (never from "free memory", which
on CPU means most of the host's RAM); sampling is per request (temperature, top-k, top-p
processors built once, values set per request; greedy is top-k 1, exactly the arg max);
the prompt tokens each request found in the shared blocks are recorded (the manager only
counts them in total).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.inference.errors import InferenceError

DEVICES = ("auto", "cpu", "cuda")
_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}
_DTYPES |= {"float16": "float16", "fp16": "float16", "half": "float16"}
# The manager builds a processor only when its generation config asks for it; each request
# then sets its own value (`per_request_processors`).
_SAMPLING_DEFAULTS = {"temperature": 0.7, "top_k": 50, "top_p": 0.9}


class BatchingConfigError(InferenceError, ValueError):
    """The options cannot make a working manager (device, dtype, a KV cache too small)."""


@dataclass(frozen=True, slots=True)
class TransformersOptions:
    model_path: str
    model_name: str
    device: str = "auto"  # auto: cuda when torch sees one
    dtype: str = "auto"  # auto: bfloat16 on cuda, float32 on cpu
    attention: str = "sdpa"  # its paged variant runs: paged|sdpa, paged|flash_attention_2
    kv_cache_bytes: int = 512 * 1024 * 1024
    block_size: int = 32  # tokens per KV block; prefixes are shared by whole blocks
    max_batch_tokens: int = 512  # tokens one forward pass takes (prefill chunks + decodes)
    max_model_len: int = 2048
    max_num_seqs: int = 64  # requests in one batch
    seed: int = 0
    cuda_graphs: bool | None = None  # None: transformers decides (on with flash attention)


def resolve_device(device: str, cuda_available: bool) -> str:
    if device not in DEVICES:
        raise BatchingConfigError(f"device {device!r} is not one of {', '.join(DEVICES)}")
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    if device == "cuda" and not cuda_available:
        raise BatchingConfigError("device cuda asked for but torch sees no GPU")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    if dtype == "auto":
        return "bfloat16" if device == "cuda" else "float32"
    if dtype not in _DTYPES:
        raise BatchingConfigError(f"dtype {dtype!r} is not supported")
    return _DTYPES[dtype]


def kv_cache_blocks(config: Any, kv_cache_bytes: int, block_size: int, dtype_bytes: int) -> int:
    """KV blocks that fit `kv_cache_bytes`: a block holds keys and values of `block_size`
    tokens in every layer."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    per_block = 2 * text.num_hidden_layers * kv_heads * head_dim * block_size * dtype_bytes
    return max(0, kv_cache_bytes // per_block)


def sampling_kwargs(temperature: float, top_p: float, vocab_size: int) -> dict[str, Any]:
    """A request's processor values: greedy (temperature 0) is top-k 1, where the arg max
    survives alone, so sampling it is exact; otherwise no top-k cut."""
    if temperature <= 0:
        return {"temperature": 1.0, "top_k": 1, "top_p": 1.0}
    return {
        "temperature": float(temperature),
        "top_k": int(vocab_size),
        "top_p": float(min(1.0, max(top_p, 1e-6))),
    }


def eos_ids(*sources: int | Sequence[int] | None) -> frozenset[int]:
    """Every end token the model's generation config or tokenizer names (vLLM stops on
    both; a converted model may disagree between the two)."""
    ids: set[int] = set()
    for source in sources:
        if source is None:
            continue
        ids.update([source] if isinstance(source, int) else source)
    return frozenset(i for i in ids if i >= 0)


def load_model(options: TransformersOptions) -> tuple[Any, Any]:
    """The model (on its device, in its dtype, eval mode) and tokenizer of a folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(options.model_path, "config.json").is_file():
        raise FileNotFoundError(f"no model folder at {options.model_path}")
    device = resolve_device(options.device, torch.cuda.is_available())
    dtype = getattr(torch, resolve_dtype(options.dtype, device))
    tokenizer = AutoTokenizer.from_pretrained(options.model_path)
    model = AutoModelForCausalLM.from_pretrained(
        options.model_path, dtype=dtype, attn_implementation=options.attention
    )
    return model.to(device).eval(), tokenizer


@dataclass
class Batching:
    """A started manager, the tokens its cache holds, and the prompt tokens each request
    found in shared blocks (filled on the manager's thread before its first token)."""

    manager: Any
    cache_tokens: int
    prefix_hits: dict[str, int]


def start_manager(model: Any, options: TransformersOptions, eos: frozenset[int]) -> Batching:
    import torch
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    dtype_bytes = torch.tensor([], dtype=model.dtype).element_size()
    blocks = kv_cache_blocks(model.config, options.kv_cache_bytes, options.block_size, dtype_bytes)
    if blocks * options.block_size < options.max_model_len:
        raise BatchingConfigError(
            f"a KV cache of {options.kv_cache_bytes} bytes holds {blocks} blocks of "
            f"{options.block_size} tokens, less than one {options.max_model_len}-token request"
        )
    generation = getattr(model, "generation_config", None)
    config = GenerationConfig(
        do_sample=True,
        max_new_tokens=options.max_model_len,
        eos_token_id=sorted(eos) or -1,
        pad_token_id=getattr(generation, "pad_token_id", None),
        **_SAMPLING_DEFAULTS,
    )
    batching = ContinuousBatchingConfig(
        block_size=options.block_size,
        num_blocks=blocks,
        max_batch_tokens=options.max_batch_tokens,
        max_requests_per_batch=options.max_num_seqs,
        per_request_processors=True,
        allow_block_sharing=True,
        seed=options.seed,
        use_cuda_graph=options.cuda_graphs,
    )
    manager = model.init_continuous_batching(
        generation_config=config, continuous_batching_config=batching
    )
    manager.warmup()  # builds the cache and scheduler now (and CUDA graphs when on)
    hits: dict[str, int] = {}
    _watch_prefix_hits(manager, hits)
    manager.start()
    return Batching(manager, blocks * options.block_size, hits)


def unregister(manager: Any, request_id: str) -> None:
    """Drop a request's result handler (the manager drops it itself only when the request
    finishes; a cancelled one never does)."""
    router = manager.output_router
    with router._lock:
        router.result_handlers.pop(request_id, None)


def _watch_prefix_hits(manager: Any, hits: dict[str, int]) -> None:
    """Wrap the cache's prefix lookup (on this cache instance) to record, per request, the
    prompt tokens served from shared blocks. The scheduler calls it on the manager's thread
    before the request's first step."""
    cache = manager.batch_processor.cache
    search = getattr(cache, "search_prefix_match", None)
    if search is None:
        return

    def counted(request_id: str, prompt_ids: list[int]) -> int:
        matched = search(request_id, prompt_ids)
        hits[request_id] = max(0, min(matched, len(prompt_ids) - 1))
        return matched

    cache.search_prefix_match = counted

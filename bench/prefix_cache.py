"""How much of each turn's prompt the engine's prefix cache can reuse from the turn before,
over long conversations: history dropped a turn at a time (before, `TURNSTREAM_HISTORY_BLOCK=0`)
against dropped in blocks (after, the default 0.25), in the same run.

The prompts are built by the assembly job's own code (`trim_history` for the stored history,
`assemble` for the prompt window) with the default settings (2048-token context, 256-token
answers, 20 stored messages), rendered with SmolLM2's chat template and counted by its
tokenizer. Conversations: `--turns` turns of questions from `bench/turn_sets/utterances.jsonl`
and answers of 20-250 words cut from Python's help topics (seeded). Reuse is counted as
vLLM's automatic prefix caching counts it: the leading tokens identical to the previous
turn's prompt, in whole 16-token blocks, with nothing evicted in between (an upper bound
a busy engine approaches as its cache holds the conversation). The previous answer's own
cached blocks are not counted (the template re-renders it), so both sides are understated
alike.

    python -m bench.prefix_cache                      # ~1 min
    python -m bench.prefix_cache --conversations 80 --turns 40

Prints a table; writes bench/results/prefix_cache.json and bench/figures/prefix_cache.png.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

import numpy as np

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from runtime.settings import Settings
from runtime.smollm2 import default_model_dir
from schemas.events import DecodingParams, Role
from stream_jobs.assembly.prompt import assemble, history_block_tokens
from stream_jobs.assembly.state import ConversationState, HistoryLimits, StoredMessage, trim_history
from stream_jobs.assembly.tokens import token_counter

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = REPO / "bench" / "turn_sets" / "utterances.jsonl"
CACHE_BLOCK = 16  # vLLM's KV block: a prefix is reused by whole blocks


def progress(text: str) -> None:
    print(f"\r  {text}   ", end="", file=sys.stderr, flush=True)


def corpus_words() -> list[str]:
    """English prose that does not change with this repository (Python's own help topics),
    so a run is comparable with the runs of other days."""
    from pydoc_data.topics import topics

    text = " ".join(topics[key] for key in sorted(topics))
    return re.sub(r"[|#*`\[\]()]", " ", text).split()


def conversations(
    count: int, turns: int, answer_words: tuple[int, int] = (20, 250), seed: int = 7
) -> list[list[tuple[str, str]]]:
    """Questions and answers, the same for every setup."""
    rng = random.Random(seed)
    questions = [json.loads(line)["complete"] for line in QUESTIONS.read_text().splitlines()]
    words = corpus_words()
    out = []
    for _ in range(count):
        talk = []
        for _ in range(turns):
            n = rng.randint(*answer_words)
            start = rng.randrange(len(words) - n)
            talk.append((rng.choice(questions), " ".join(words[start : start + n])))
        out.append(talk)
    return out


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    differ = np.nonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0]
    return int(differ[0]) if len(differ) else n


def run_conversation(talk, block: float, tokenizer, count, settings: Settings) -> list[dict]:
    """`count`: the assembly's own token counter; `tokenizer`: the chat template's."""
    limits = HistoryLimits(settings.history_max_messages, settings.history_max_chars, block)
    answer_room = min(DecodingParams().max_tokens, settings.max_model_len // 2)
    budget = settings.max_model_len - answer_room
    state = ConversationState()
    previous: list[int] = []
    rows = []
    for question, answer in talk:
        messages, context = assemble(
            persona=settings.system_prompt,
            profile="",
            passages=[],
            history=state.messages,
            query=question,
            budget_tokens=budget,
            count_tokens=count,
            history_block_tokens=history_block_tokens(budget, block),
        )
        chat = [{"role": str(m.role), "content": m.content} for m in messages]
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False)
        reused = common_prefix(previous, ids) // CACHE_BLOCK * CACHE_BLOCK
        rows.append({"prompt": len(ids), "reused": reused, "history": context.history_messages})
        previous = ids
        state.messages += [
            StoredMessage(Role.USER, question, count(question)),
            StoredMessage(Role.ASSISTANT, answer, count(answer)),
        ]
        trim_history(state, limits)
    return rows


def summarize(per_conversation: list[list[dict]], first_turn: int = 1) -> dict:
    rows = [r for conv in per_conversation for r in conv[first_turn:]]
    rates = [
        sum(r["reused"] for r in conv[first_turn:]) / sum(r["prompt"] for r in conv[first_turn:])
        for conv in per_conversation
    ]
    return {
        "hit_rate": sum(r["reused"] for r in rows) / sum(r["prompt"] for r in rows),
        "hit_rate_p10": percentile(rates, 10),
        "hit_rate_p50": percentile(rates, 50),
        "hit_rate_p90": percentile(rates, 90),
        "prompt_tokens_mean": float(np.mean([r["prompt"] for r in rows])),
        "prefill_tokens_mean": float(np.mean([r["prompt"] - r["reused"] for r in rows])),
        "history_messages_mean": float(np.mean([r["history"] for r in rows])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument(
        "--answer-words", default="20,250", help="answers' length range, in words (min,max)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--blocks", default="0,0.25,0.5", help="TURNSTREAM_HISTORY_BLOCK values (0: before)"
    )
    args = parser.parse_args()
    setups = {f"block {b}": float(b) for b in args.blocks.split(",")}
    from transformers import AutoTokenizer

    settings = Settings.from_env()
    model_dir = default_model_dir(settings)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    count = token_counter(model_dir)  # as the assembly job counts history
    low, high = (int(n) for n in args.answer_words.split(","))
    talks = conversations(args.conversations, args.turns, (low, high), args.seed)
    results: dict[str, dict] = {}
    per_turn: dict[str, list[float]] = {}
    for name, block in setups.items():
        runs = []
        for i, talk in enumerate(talks, 1):
            progress(f"{name}: conversation {i}/{len(talks)}")
            runs.append(run_conversation(talk, block, tokenizer, count, settings))
        results[name] = {
            "all turns after the first": summarize(runs),
            f"turns {args.turns // 2 + 1}-{args.turns}": summarize(runs, args.turns // 2),
        }
        per_turn[name] = [
            float(np.mean([conv[t]["reused"] / conv[t]["prompt"] for conv in runs]))
            for t in range(args.turns)
        ]
    print(file=sys.stderr)
    print(
        f"{args.conversations} conversations x {args.turns} turns, answers of "
        f"{args.answer_words} words, seed {args.seed}, SmolLM2 template"
    )
    print(
        f"{'setup':>10} {'turns':>26} {'hit rate':>9} {'p10/p50/p90 per conversation':>30} "
        f"{'prompt':>7} {'prefill':>8} {'history msgs':>13}"
    )
    for name, parts in results.items():
        for part, s in parts.items():
            spread = f"{s['hit_rate_p10']:.0%}/{s['hit_rate_p50']:.0%}/{s['hit_rate_p90']:.0%}"
            print(
                f"{name:>10} {part:>26} {s['hit_rate']:>9.1%} {spread:>30} "
                f"{s['prompt_tokens_mean']:>7.0f} {s['prefill_tokens_mean']:>8.0f} "
                f"{s['history_messages_mean']:>13.1f}"
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "prefix_cache.json"
    out.write_text(json.dumps({"args": vars(args), "results": results, "per_turn": per_turn}))
    plot(per_turn, args)
    print(f"wrote {out} and bench/figures/prefix_cache.png")


def plot(per_turn: dict[str, list[float]], args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, rates in per_turn.items():
        label = "a turn at a time (before)" if name == "block 0" else f"dropped in {name}s"
        ax.plot(range(1, len(rates) + 1), [100 * r for r in rates], marker=".", label=label)
    ax.set_xlabel("turn of the conversation")
    ax.set_ylabel("prompt reused from the turn before, %")
    ax.set_title(f"Prefix cache reuse, {args.conversations} conversations (SmolLM2 template)")
    ax.set_ylim(0, 100)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, "prefix_cache")


if __name__ == "__main__":
    main()

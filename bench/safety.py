"""What the output safety check costs, and how fast it stops an unsafe answer.

The whole pipeline runs in-process (edge → Kafka → preprocess with input screening →
assembly → inference with the fake engine at a fixed token rate → safety worker → edge),
once per policy: `off` (the baseline, same run), `optimistic`, `hold_back`. For each:
(1) N benign turns back to back: time to the first visible text and to `response.done`
    at the WebSocket client; the ratio to `off` is what the policy adds;
(2) N turns whose answer carries an API key early on: how many tokens the engine still
    generated after the key before the cut stopped it, and that in milliseconds.

    python -m bench.safety                  # 20 turns per policy, 20 ms per token (~2 min)
    python -m bench.safety --turns 40 --token-ms 10 --window 50

Prints a table; writes bench/results/safety.{json,png} and bench/figures/safety.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid

import uvloop

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from harness.stack import pipeline
from runtime.settings import Settings
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta, ResponseDone

POLICIES = ("off", "optimistic", "hold_back")
SECRET = "sk-proj-" + "A1b2C3d4" * 5
BENIGN = " ".join(f"word{i}" for i in range(120))  # the fake engine echoes it: ~125 tokens
UNSAFE = f"keep {SECRET} " + " ".join(f"word{i}" for i in range(300))
KEY_AT_TOKEN = 4  # "You said: keep <key>": the key is the fourth token of the answer


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


async def one_turn(client: EdgeClient, text: str) -> tuple[float | None, float, ResponseDone]:
    started = time.perf_counter()
    first = None
    turn_id = await client.start_turn(f"c-{uuid.uuid4().hex[:8]}", text)
    async for event in client.events(turn_id):
        if isinstance(event, ResponseDelta) and first is None:
            first = (time.perf_counter() - started) * 1000
        if isinstance(event, ResponseDone):
            return first, (time.perf_counter() - started) * 1000, event
    raise AssertionError("unreachable")


async def run_policy(policy: str, args: argparse.Namespace) -> dict:
    settings = Settings.from_env(
        namespace=f"bench-safety-{policy}-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        safety_output_policy=policy,
        safety_window_tokens=args.window,
        safety_window_overlap=args.overlap,
    )
    engine = FakeEngine(token_interval_s=args.token_ms / 1000)
    first_ms, done_ms, after_key = [], [], []
    async with (
        pipeline(settings, engine) as running,
        EdgeClient.connect(running.url, running.token()) as client,
    ):
        await one_turn(client, "warm up")
        for i in range(args.turns):
            progress(f"{policy}: benign turn {i + 1}/{args.turns}")
            first, done, _ = await one_turn(client, BENIGN)
            first_ms.append(first or done)
            done_ms.append(done)
        if policy != "off":
            for i in range(args.turns):
                progress(f"{policy}: unsafe turn {i + 1}/{args.turns}")
                _, _, cut = await one_turn(client, UNSAFE)
                assert cut.error is not None and cut.error.code == "output_cut", cut
                after_key.append(cut.usage.completion_tokens - KEY_AT_TOKEN)
    return {
        "first_visible_ms": first_ms,
        "done_ms": done_ms,
        "tokens_after_key": after_key,
    }


def summary(results: dict[str, dict], token_ms: float) -> list[dict]:
    base_first = percentile(results["off"]["first_visible_ms"], 50)
    base_done = percentile(results["off"]["done_ms"], 50)
    rows = []
    for policy, r in results.items():
        after = r["tokens_after_key"]
        rows.append(
            {
                "policy": policy,
                "first_p50_ms": percentile(r["first_visible_ms"], 50),
                "first_p99_ms": percentile(r["first_visible_ms"], 99),
                "first_ratio": percentile(r["first_visible_ms"], 50) / base_first,
                "done_p50_ms": percentile(r["done_ms"], 50),
                "done_ratio": percentile(r["done_ms"], 50) / base_done,
                "after_key_p50_tokens": percentile(after, 50) if after else None,
                "after_key_max_tokens": max(after) if after else None,
                "after_key_p50_ms": percentile(after, 50) * token_ms if after else None,
            }
        )
    return rows


def print_table(rows: list[dict]) -> None:
    print(
        f"{'policy':>11} {'first p50':>10} {'p99':>8} {'ratio':>6} {'done p50':>9} "
        f"{'ratio':>6} {'after key p50':>14} {'max':>5}"
    )
    for r in rows:
        after = (
            f"{r['after_key_p50_tokens']:.0f} tok {r['after_key_p50_ms']:.0f} ms"
            if r["after_key_p50_tokens"] is not None
            else "-"
        )
        worst = f"{r['after_key_max_tokens']}" if r["after_key_max_tokens"] is not None else "-"
        print(
            f"{r['policy']:>11} {r['first_p50_ms']:>8.1f}ms {r['first_p99_ms']:>6.1f}ms "
            f"{r['first_ratio']:>6.2f} {r['done_p50_ms']:>7.1f}ms {r['done_ratio']:>6.2f} "
            f"{after:>14} {worst:>5}"
        )


def plot(rows: list[dict], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    names = [r["policy"] for r in rows]
    left.bar(names, [r["first_p50_ms"] for r in rows], color=["grey", "tab:blue", "tab:orange"])
    left.set_ylabel("first visible text, p50 (ms)")
    left.set_title(f"window {args.window} tokens, {args.token_ms:g} ms/token")
    checked = [r for r in rows if r["after_key_p50_tokens"] is not None]
    right.bar(
        [r["policy"] for r in checked],
        [r["after_key_p50_tokens"] for r in checked],
        color=["tab:blue", "tab:orange"][: len(checked)],
    )
    right.axhline(args.window, color="red", linestyle="--", label="one window")
    right.set_ylabel("tokens generated after the unsafe one, p50")
    right.legend()
    fig.tight_layout()
    save_figure(fig, "safety")


async def main_async(args: argparse.Namespace) -> None:
    results = {}
    for policy in POLICIES:
        results[policy] = await run_policy(policy, args)
    rows = summary(results, args.token_ms)
    print_table(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "safety.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    plot(rows, args)
    print(f"wrote {RESULTS / 'safety.json'} and bench/figures/safety.png")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.safety")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--token-ms", type=float, default=20.0)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--overlap", type=int, default=10)
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()

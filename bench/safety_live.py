"""The red-team set through the live pipeline: every attack and benign prompt is sent as a
turn (each in a conversation of its own) to a running edge, and counted as stopped when it
ends with finish reason `safety` (refused at the input, or cut while streaming). Offline
`evaluate` judges the checks alone; this judges what a user actually gets.

    python -m bench.safety_live --set v1                  # the local stack's edge
    python -m bench.safety_live --url ws://host:8765/ --concurrency 4

Answers are capped (`--max-tokens`, 16) so a real model does not spend minutes on the benign
set. Prints catch and false-positive rates, per category, the misses, and the time to
`response.done`, with a progress bar.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Sequence

import uvloop

from moderation.evaluate import Item, Outcome, latency_line, load_set, rate_line, table, wrong
from runtime.settings import Settings
from schemas.events import FinishReason
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, TurnRejected


async def send_all(
    url: str, token: str, items: Sequence[Item], *, concurrency: int = 8, max_tokens: int = 16
) -> list[Outcome]:
    """One turn per item, `concurrency` at a time over one connection; in item order."""
    limit = asyncio.Semaphore(concurrency)
    finished = 0

    async with EdgeClient.connect(url, token) as client:

        async def one(item: Item) -> Outcome:
            nonlocal finished
            async with limit:
                started = time.perf_counter()
                try:
                    done = await client.ask(
                        f"redteam-{uuid.uuid4().hex[:10]}", item.text, max_tokens=max_tokens
                    )
                except TurnRejected as err:  # refused at the edge (size, rate): not a catch
                    return Outcome(item, False, (), [], err.error.code)
                elapsed = (time.perf_counter() - started) * 1000
            finished += 1
            print(f"\r  {finished}/{len(items)} turns", end="", file=sys.stderr, flush=True)
            code = done.error.code if done.error is not None else None
            stopped = done.finish_reason == FinishReason.SAFETY
            return Outcome(item, stopped, (code,) if code else (), [elapsed], None)

        outcomes = await asyncio.gather(*(one(item) for item in items))
    print(file=sys.stderr)
    return list(outcomes)


def report(name: str, attacks: list[Outcome], benign: list[Outcome]) -> None:
    print(f"\nred-team set {name}, live pipeline")
    print(rate_line("catch rate", attacks))
    print(rate_line("false positives", benign))
    table("attacks by category", attacks)
    table("benign by category", benign)
    wrong("missed attacks", attacks)
    wrong("benign prompts stopped", benign)
    refused = [o for o in [*attacks, *benign] if o.error]
    if refused:
        print(f"\n{len(refused)} turns refused by the edge (first: {refused[0].error})")
    print("\ntime to response.done")
    print(latency_line("per turn", [t for o in attacks + benign for t in o.latencies_ms]))


async def main_async(args: argparse.Namespace) -> None:
    settings = Settings.from_env()
    url = args.url or f"ws://127.0.0.1:{settings.edge_port}/"
    token = mint_token(settings.auth_secret, args.user, args.tenant)
    sets = load_set(args.set)
    options = {"concurrency": args.concurrency, "max_tokens": args.max_tokens}
    print(f"sending {len(sets['attacks'])} attacks to {url}", file=sys.stderr)
    attacks = await send_all(url, token, sets["attacks"], **options)
    print(f"sending {len(sets['benign'])} benign prompts", file=sys.stderr)
    benign = await send_all(url, token, sets["benign"], **options)
    report(args.set, attacks, benign)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.safety_live")
    parser.add_argument("--set", default="v1")
    parser.add_argument("--url", default="", help="the edge (default: the local stack's)")
    parser.add_argument("--tenant", default="redteam")
    parser.add_argument("--user", default="redteam")
    parser.add_argument("--concurrency", type=int, default=8)  # the edge allows 8 per session
    parser.add_argument("--max-tokens", type=int, default=16)
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()

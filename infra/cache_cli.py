"""`python -m infra.cache_cli`: look at and correct a tenant's semantic cache.

    python -m infra.cache_cli stats acme          # hit rate, entries, stores
    python -m infra.cache_cli find acme "What is the capital of France?"
    python -m infra.cache_cli invalidate acme <entry id>
    python -m infra.cache_cli clear acme          # every entry of the tenant

`find` shows the entry a question would be answered from (exact repeat or paraphrase; it
counts as one lookup in the stats), so
a wrong cached answer can be found from the question a user asked, then invalidated. Every
assembly job sees the change at its next lookup.
"""

from __future__ import annotations

import argparse
import asyncio

from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from stream_jobs.assembly.cache.semantic_cache import MiniLMEmbedder, SemanticCache


async def run(cache: SemanticCache, action: str, tenant: str, subject: str | None) -> str:
    match action:
        case "stats":
            s = await cache.stats(tenant)
            return (
                f"{tenant}: {s.entries} entries, hit rate {s.hit_rate:.1%} "
                f"({s.hits} hits, {s.exact_hits} exact, {s.misses} misses), {s.stores} stores, "
                f"{s.evictions} evictions"
            )
        case "find":
            assert subject is not None
            vector = await asyncio.to_thread(MiniLMEmbedder().embed, subject)
            hit = await cache.lookup(tenant, subject, vector)
            if hit is None:
                return "no entry would answer it"
            kind = "exact" if hit.exact else f"cosine {hit.score:.3f}"
            return f"{hit.entry_id} ({kind}, {hit.hits} hits): {hit.query!r} -> {hit.answer!r}"
        case "invalidate":
            assert subject is not None
            found = await cache.invalidate(tenant, subject)
            return f"{subject}: {'invalidated' if found else 'no such entry'}"
        case "clear":
            return f"{tenant}: {await cache.clear(tenant)} entries removed"
    raise ValueError(f"unknown action {action!r}")


async def main_async(args: argparse.Namespace) -> None:
    settings = Settings.from_env()
    redis = redis_client(settings.redis_url)
    try:
        prefix = RedisNames.for_namespace(settings.namespace).prefix
        cache = SemanticCache(redis, prefix, threshold=settings.cache_threshold)
        print(await run(cache, args.action, args.tenant, args.subject))
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m infra.cache_cli")
    parser.add_argument("action", choices=["stats", "find", "invalidate", "clear"])
    parser.add_argument("tenant")
    parser.add_argument("subject", nargs="?", help="the question (find) or entry id")
    args = parser.parse_args()
    if args.action in {"find", "invalidate"} and not args.subject:
        parser.error(f"{args.action} needs a question or an entry id")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()

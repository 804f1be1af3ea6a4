"""`python -m moderation.blacklist_cli`: put users and messages on the safety blacklist
(or take them off), for operators until the audit feeds it.

    python -m moderation.blacklist_cli add-user acme/mallory --ttl 86400
    python -m moderation.blacklist_cli remove-user acme/mallory
    python -m moderation.blacklist_cli add-text "the exact spam message" --ttl 3600
    python -m moderation.blacklist_cli remove-text "the exact spam message"

Users are `tenant/user`. A message is stored as the hash of its normalised text (as the
input screen computes it), so it matches again with other spacing, case or leetspeak, and
the text itself is never stored. Entries without `--ttl` are permanent.
"""

from __future__ import annotations

import argparse
import asyncio

from moderation.blacklist import RedisBlacklist, content_hash
from moderation.normalize import HEAD_CHARS, TAIL_CHARS, normalize
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames


def message_hash(text: str) -> str:
    """The key a message is blacklisted under: what the input screen looks up."""
    return content_hash(normalize(text, head=HEAD_CHARS, tail=TAIL_CHARS))


async def apply(blacklist: RedisBlacklist, action: str, subject: str, ttl_s: float | None) -> str:
    match action:
        case "add-user":
            await blacklist.add_user(subject, ttl_s)
        case "remove-user":
            await blacklist.remove_user(subject)
        case "add-text":
            await blacklist.add_content(message_hash(subject), ttl_s)
        case "remove-text":
            await blacklist.remove_content(message_hash(subject))
        case _:
            raise ValueError(f"unknown action {action!r}")
    return f"{action} {subject if 'user' in action else message_hash(subject)[:16]}: done"


async def main_async(args: argparse.Namespace) -> None:
    settings = Settings.from_env()
    redis = redis_client(settings.redis_url)
    try:
        prefix = RedisNames.for_namespace(settings.namespace).prefix
        print(
            await apply(RedisBlacklist(redis, prefix=prefix), args.action, args.subject, args.ttl)
        )
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m moderation.blacklist_cli")
    parser.add_argument("action", choices=["add-user", "remove-user", "add-text", "remove-text"])
    parser.add_argument("subject", help="tenant/user, or the message text")
    parser.add_argument("--ttl", type=float, default=None, help="seconds (default: permanent)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()

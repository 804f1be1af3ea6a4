"""`python -m infra.api_keys`: issue, list and revoke a tenant's API keys (the HTTP door's
`Authorization: Bearer`, as OpenAI's key is sent; the WebSocket's `?token=` takes them too).

    python -m infra.api_keys create acme bob --label "support bot"   # prints the key, once
    python -m infra.api_keys list acme
    python -m infra.api_keys revoke <key id>                         # stops it at once

Only a key's digest is stored: a lost key cannot be shown again, only revoked and replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from ws_edge.api_keys import ApiKeys, key_id


async def run(keys: ApiKeys, args: argparse.Namespace) -> str:
    match args.action:
        case "create":
            key = await keys.create(args.tenant, args.user, label=args.label, now_s=time.time())
            return f"{key}\n(id {key_id(key)}; store it now: it is not kept)"
        case "list":
            rows = await keys.listed(args.tenant)
            lines = [
                f"{id_}  {r.user_id:<20} {'revoked' if r.revoked_at_s else 'active ':<8} "
                f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(r.created_at_s))}  {r.label}"
                for id_, r in rows
            ]
            return "\n".join(lines) or f"{args.tenant}: no keys"
        case "revoke":
            record = await keys.revoke(args.key_id, now_s=time.time())
            if record is None:
                return f"{args.key_id}: no such key"
            return f"{args.key_id}: revoked (tenant {record.tenant_id}, user {record.user_id})"
    raise ValueError(f"unknown action {args.action!r}")


async def main_async(args: argparse.Namespace) -> None:
    settings = Settings.from_env()
    redis = redis_client(settings.redis_url)
    try:
        print(await run(ApiKeys(redis, RedisNames.for_namespace(settings.namespace)), args))
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m infra.api_keys")
    actions = parser.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="issue a key for a tenant's user")
    create.add_argument("tenant")
    create.add_argument("user")
    create.add_argument("--label", default="", help="what the key is for")
    listing = actions.add_parser("list", help="a tenant's keys (ids, never the keys)")
    listing.add_argument("tenant")
    revoke = actions.add_parser("revoke", help="stop a key at once")
    revoke.add_argument("key_id")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()

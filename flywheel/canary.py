"""Canary / A-B in production: start, watch, compare, promote, roll back (one command each).

    python -m flywheel.canary start --candidate terse.json --fraction 0.05 \\
        [--tenants acme]
    python -m flywheel.canary status
    python -m flywheel.canary compare --hours 24     # arms side by side (ClickHouse)
    python -m flywheel.canary promote                # every conversation → candidate
    python -m flywheel.canary rollback               # every conversation → control

The experiment lives in Redis (`schemas.canary`), so every edge applies it within a second
and a rollback is immediate; conversations keep their arm (a hash of the conversation).
Traces record the arm (`traces.arm`), so `compare` reads the outcome from ClickHouse: turns,
errors, TTFT and end-to-end p50/p99, cost per turn and the thumbs-up share per arm.
Promotion keeps the experiment key (all traffic on the candidate) until the candidate's
settings become the deployment's; `rollback` removes it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from redis.exceptions import RedisError

from flywheel.errors import FlywheelError
from runtime.clickhouse.client import analyst_client
from runtime.clickhouse.sql import clickhouse_message, render_table
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.canary import CanaryConfig, parse_config
from schemas.channels import RedisNames
from schemas.flywheel import Candidate

COMPARE_SQL = """
SELECT
    t.arm AS arm,
    count() AS turns,
    round(avg(t.error_code != ''), 4) AS error_rate,
    round(quantile(0.5)(t.ttft_ms), 1) AS ttft_p50_ms,
    round(quantile(0.99)(t.ttft_ms), 1) AS ttft_p99_ms,
    round(quantile(0.99)(t.e2e_ms), 1) AS e2e_p99_ms,
    round(avg(t.cost_usd), 6) AS cost_per_turn,
    round(sumIf(f.ups, f.votes > 0) / greatest(sumIf(f.votes, f.votes > 0), 1), 3) AS thumbs_up
FROM {db}.traces AS t FINAL
LEFT JOIN (
    SELECT turn_id, countIf(kind = 'thumbs_up') AS ups,
           countIf(kind IN ('thumbs_up', 'thumbs_down')) AS votes
    FROM {db}.feedback GROUP BY turn_id
) AS f ON f.turn_id = t.turn_id
WHERE t.arm != '' AND t.submitted_at > now() - INTERVAL {hours} HOUR
GROUP BY arm ORDER BY arm
"""


class CanaryError(FlywheelError, RuntimeError):
    pass


async def read(settings: Settings) -> CanaryConfig | None:
    redis = redis_client(settings.redis_url)
    try:
        return parse_config(
            await redis.get(RedisNames.for_namespace(settings.namespace).canary_key())
        )
    finally:
        await redis.aclose()


async def write(settings: Settings, config: CanaryConfig | None) -> None:
    redis = redis_client(settings.redis_url)
    key = RedisNames.for_namespace(settings.namespace).canary_key()
    try:
        if config is None:
            await redis.delete(key)
        else:
            await redis.set(key, msgspec.json.encode(config))
    finally:
        await redis.aclose()


def load_candidate(path: str) -> Candidate:
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=Candidate)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CanaryError(f"candidate {path}: {exc}") from None


async def start(settings: Settings, args: argparse.Namespace) -> str:
    if not 0.0 < args.fraction <= 1.0:
        raise CanaryError(f"--fraction must be in (0, 1], not {args.fraction}")
    running = await read(settings)
    if running is not None and not args.replace:
        raise CanaryError(
            f"canary {running.candidate.name!r} is running: rollback first (or --replace)"
        )
    tenants = [t for t in args.tenants.split(",") if t] if args.tenants else []
    config = CanaryConfig(
        candidate=load_candidate(args.candidate),
        fraction=args.fraction,
        tenants=tenants,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    await write(settings, config)
    where = f"tenants {', '.join(tenants)}" if tenants else "every tenant"
    return f"canary {config.candidate.name!r}: {config.fraction:.1%} of conversations of {where}"


async def status(settings: Settings) -> str:
    config = await read(settings)
    if config is None:
        return "no canary running: all traffic on the deployment's configuration"
    state = "promoted (all conversations)" if config.promoted else f"{config.fraction:.1%}"
    return (
        f"canary {config.candidate.name!r} since {config.started_at}: {state}; "
        f"candidate {msgspec.json.encode(config.candidate).decode()}"
    )


async def promote(settings: Settings) -> str:
    config = await read(settings)
    if config is None:
        raise CanaryError("no canary running: nothing to promote")
    await write(settings, msgspec.structs.replace(config, promoted=True))
    return f"promoted {config.candidate.name!r}: every conversation now runs the candidate"


async def rollback(settings: Settings) -> str:
    config = await read(settings)
    await write(settings, None)
    if config is None:
        return "no canary was running"
    return f"rolled back {config.candidate.name!r}: every conversation runs control"


def compare(settings: Settings, hours: int) -> str:
    try:
        client = analyst_client(settings)
        result = client.query(COMPARE_SQL.format(db="turnstream", hours=int(hours)))
    except Exception as err:
        raise CanaryError(f"ClickHouse: {clickhouse_message(err)}") from err
    if not result.result_rows:
        return f"no traces with an arm in the last {hours} h"
    return render_table(list(result.column_names), result.result_rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    begin = commands.add_parser("start", help="start an experiment")
    begin.add_argument("--candidate", required=True, help="a JSON file (schemas.flywheel)")
    begin.add_argument("--fraction", type=float, required=True)
    begin.add_argument("--tenants", default="", help="comma-separated (default: all)")
    begin.add_argument("--replace", action="store_true", help="replace a running canary")
    commands.add_parser("status")
    commands.add_parser("promote")
    commands.add_parser("rollback")
    versus = commands.add_parser("compare")
    versus.add_argument("--hours", type=int, default=24)
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    try:
        if args.command == "compare":
            print(compare(settings, args.hours))
            return 0
        action = {
            "start": lambda: start(settings, args),
            "status": lambda: status(settings),
            "promote": lambda: promote(settings),
            "rollback": lambda: rollback(settings),
        }[args.command]
        print(asyncio.run(action()))
        return 0
    except CanaryError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (RedisError, OSError) as err:
        print(f"error: Redis unreachable: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Replay recorded turns or an eval set into an isolated namespace against a candidate.

    # an eval set, against a candidate with another system prompt, as fast as it goes
    python -m producers.replay --set evalsets/golden/20261130-101500-ab12cd \\
        --name terse --system-prompt "Answer in one sentence." --start-stack
    # the last two hours of live traffic of one tenant, at the recorded pace
    python -m producers.replay --topic turns.submitted --since 2h --tenant acme \\
        --pace recorded --candidate candidate.json --start-stack

The run plays into namespace `replay-<run id>` (its own topics, consumer groups and Redis
keys; the live namespace is refused), writes `<out>/<run id>/run.json` and `results.jsonl`
(`schemas.flywheel`), and its traces reach ClickHouse tagged `run_id` when the namespace's
traces job and sink run (`--start-stack` starts them with the workers). Exit codes: 0 the
run finished (failed turns are data for the quality gate), 1 no turn was answered (the
candidate is down or crashed), 2 bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from producers.replay.plan import (
    PlanError,
    PlannedConversation,
    check_namespace,
    from_eval_items,
    from_recorded,
)
from producers.replay.runner import Replay, Target, iso_now
from producers.replay.source import SourceError, read_eval_set, read_recorded
from producers.times import TimeError, parse_time_ms
from runtime.clickhouse.client import (
    DEFAULT_DATABASE,
    SINK_HTTP_HOST,
    analyst_client,
    sink_http_answers,
)
from runtime.clickhouse.http_auth import USER, local_password
from runtime.kafka_topics import ensure_topics
from runtime.processes import Child, StackError, start_roles, stop_roles
from runtime.redis import redis_client
from runtime.settings import Settings, settings_env
from schemas.flywheel import Candidate, RunManifest, write_jsonl
from schemas.topics import REGISTRY

# the roles a replay needs: no edge (the runner is the client), no speech
REPLAY_ROLES = ("inference", "preprocess", "safety", "assembly", "traces", "sink")


def candidate_from(args: argparse.Namespace) -> Candidate:
    if args.candidate:
        try:
            return msgspec.json.decode(Path(args.candidate).read_bytes(), type=Candidate)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise PlanError(f"candidate {args.candidate}: {exc}") from None
    return Candidate(
        name=args.name,
        system_prompt=args.system_prompt,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        pool=args.pool,
        safety_output_policy=args.safety_output_policy,
        engine=args.engine,
    )


def candidate_env(candidate: Candidate) -> dict[str, str]:
    """The settings a candidate changes for the roles it runs."""
    env: dict[str, str] = {}
    if candidate.system_prompt:
        env["TURNSTREAM_SYSTEM_PROMPT"] = candidate.system_prompt
    if candidate.safety_output_policy:
        env["TURNSTREAM_SAFETY_OUTPUT_POLICY"] = candidate.safety_output_policy
    if candidate.engine:
        env["TURNSTREAM_ENGINE"] = candidate.engine
    return env


def store_env(live: Settings) -> dict[str, str]:
    """Where the candidate's sink writes: the live store, under the run's id. While the live
    sink holds the embedded engine (one process may open its directory), through the
    ClickHouse interface that sink serves; a real server is shared as it is."""
    if live.clickhouse_url or not sink_http_answers(live):
        return {}
    password = urllib.parse.quote(local_password(live), safe="")
    url = f"http://{USER}:{password}@{SINK_HTTP_HOST}:{live.clickhouse_http_port}"
    return {
        "TURNSTREAM_CLICKHOUSE_URL": f"{url}/{DEFAULT_DATABASE}",
        "TURNSTREAM_CLICKHOUSE_HTTP_PORT": "0",  # the live sink serves the interface
    }


async def wait_for_traces(live: Settings, run_id: str, expected: int, timeout_s: float) -> int:
    """How many of the run's traces the store holds, once it holds `expected` of them or
    `timeout_s` has passed (progress on stderr)."""
    client = await asyncio.to_thread(analyst_client, live)
    sql = f"SELECT count() FROM {DEFAULT_DATABASE}.traces WHERE run_id = {{run:String}}"
    deadline = time.monotonic() + timeout_s
    landed = 0
    while True:
        landed = int(await asyncio.to_thread(client.command, sql, parameters={"run": run_id}))
        print(f"\rtraces of {run_id} in the store: {landed}/{expected}", end="", file=sys.stderr)
        if landed >= expected or time.monotonic() > deadline:
            print(file=sys.stderr)
            return landed
        await asyncio.sleep(0.5)


def start_stack(
    settings: Settings, candidate: Candidate, logs: Path, live: Settings
) -> list[Child]:
    env = {
        **os.environ,
        **settings_env(settings),
        **candidate_env(candidate),
        **store_env(live),
        "PYTHONUNBUFFERED": "1",
    }
    return start_roles(env, logs, log_prefix=f"{settings.namespace}-", only=REPLAY_ROLES)


async def plan_of(
    args: argparse.Namespace, live: Settings
) -> tuple[list[PlannedConversation], str, str, Path | None]:
    """The conversations to play, a description of the source, its checksum, media root."""
    if args.set:
        folder = Path(args.set)
        manifest, items = read_eval_set(folder)
        source = f"{manifest.name}/{manifest.version}"
        return from_eval_items(items), source, manifest.items_sha256, folder
    spec = next((t for t in REGISTRY if t.name == args.topic), None)
    if spec is None:
        known = ", ".join(t.name for t in REGISTRY)
        raise SourceError(f"unknown topic {args.topic!r} (the registry has: {known})")
    now = time.time() * 1000
    start = parse_time_ms(args.since, now)
    end = parse_time_ms(args.until, now) if args.until else now
    topic = spec.full_name(live.namespace)
    turns, unreadable = await read_recorded(live.kafka_bootstrap, topic, start_ms=start, end_ms=end)
    if unreadable:
        print(f"{unreadable} unreadable records skipped", file=sys.stderr)
    conversations = from_recorded(turns, tenant=args.tenant, max_turns=args.max_turns)
    source = f"{topic} [{args.since}, {args.until or 'now'})" + (
        f" tenant={args.tenant}" if args.tenant else ""
    )
    return conversations, source, "", None


async def main_async(args: argparse.Namespace) -> int:
    live = Settings.from_env()
    candidate = candidate_from(args)
    run_id = args.run_id or f"{candidate.name}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    namespace = args.namespace or f"replay-{run_id}"
    check_namespace(namespace, live.namespace)
    conversations, source, source_sha, media_root = await plan_of(args, live)
    if not conversations:
        raise SourceError(f"nothing to replay in {source}")
    settings = Settings.from_env(namespace=namespace)
    await ensure_topics(
        settings.kafka_bootstrap, namespace, replication_factor=settings.kafka_replication_factor
    )
    children: list[Child] = []
    if args.start_stack:
        logs = live.state_path / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        print(f"starting the candidate's workers in {namespace}", file=sys.stderr)
        children = await asyncio.to_thread(start_stack, settings, candidate, logs, live)
    redis = redis_client(settings.redis_url)
    target = Target.of(settings, redis, edge_id=f"replay-{run_id}", source=live)
    replay = Replay(
        target,
        run_id=run_id,
        candidate=candidate,
        media_root=media_root,
        concurrency=args.concurrency,
        turn_timeout_s=args.turn_timeout_s,
        pace=args.pace,
    )
    started = iso_now()
    short = ""  # said in the manifest when the run's traces did not all land
    try:
        results = await replay.run(conversations)
        if children:  # our sink writes the traces after the answers: let it finish
            expected = len(results) - replay.tally.timed_out
            landed = await wait_for_traces(live, run_id, expected, args.traces_timeout_s)
            if landed < expected:
                short = f"only {landed} traces reached the store in {args.traces_timeout_s} s"
    finally:
        await redis.aclose()
        await asyncio.to_thread(stop_roles, children)
    tally = replay.tally
    out = Path(args.out) / run_id
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "results.jsonl", sorted(results, key=lambda r: (r.item_id, r.index)))
    notes = []
    if tally.timed_out:
        notes.append(f"{tally.timed_out} turns not answered within {args.turn_timeout_s} s")
    if tally.media_missing:
        notes.append(f"{tally.media_missing} media expired in the recording")
    if short:
        notes.append(short)
    manifest = RunManifest(
        run_id=run_id,
        namespace=namespace,
        candidate=candidate,
        source=source,
        source_sha256=source_sha,
        started_at=started,
        finished_at=iso_now(),
        pace=args.pace,
        turns=len(results),
        completed=sum(1 for r in results if not r.error_code),
        failed=sum(1 for r in results if r.error_code),
        notes="; ".join(notes),
    )
    (out / "run.json").write_bytes(msgspec.json.format(msgspec.json.encode(manifest)))
    print(f"run {run_id}: {manifest.completed}/{manifest.turns} answered → {out}")
    if results and tally.timed_out == len(results):
        print("no turn was answered: is the candidate's stack running?", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--set", help="an eval set version's folder")
    source.add_argument("--topic", help="a recorded topic (registry name: turns.submitted)")
    parser.add_argument("--since", default="1h", help="with --topic: 2h, an ISO time, epoch ms")
    parser.add_argument("--until", default="", help="with --topic: the slice's end (now)")
    parser.add_argument("--tenant", default="", help="with --topic: only this tenant's turns")
    parser.add_argument("--max-turns", type=int, default=0)
    parser.add_argument("--candidate", help="a JSON file of the candidate (schemas.flywheel)")
    parser.add_argument("--name", default="candidate")
    parser.add_argument("--system-prompt", default="")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--pool", default="")
    parser.add_argument("--safety-output-policy", default="")
    parser.add_argument("--engine", default="", choices=["", "fake", "vllm"])
    parser.add_argument("--run-id", default="")
    parser.add_argument("--namespace", default="", help="default: replay-<run id>")
    parser.add_argument("--pace", default="fast", choices=["fast", "recorded"])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--turn-timeout-s", type=float, default=120.0)
    parser.add_argument("--out", default="runs")
    parser.add_argument("--start-stack", action="store_true", help="run the candidate's workers")
    parser.add_argument(
        "--traces-timeout-s",
        type=float,
        default=60.0,
        help="with --start-stack: how long to wait for the run's traces to reach the store",
    )
    args = parser.parse_args(argv)
    try:
        return asyncio.run(main_async(args))
    except (PlanError, SourceError, TimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except StackError as err:
        print(f"error: the candidate's stack did not start: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

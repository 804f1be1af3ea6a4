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


def start_stack(settings: Settings, candidate: Candidate, logs: Path) -> list[Child]:
    env = {
        **os.environ,
        **settings_env(settings),
        **candidate_env(candidate),
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
        children = await asyncio.to_thread(start_stack, settings, candidate, logs)
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
    try:
        results = await replay.run(conversations)
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

"""Replays on the real pipeline: a recorded slice of a live topic and an eval set play into
an isolated namespace against a candidate, conversations keep their order and history, and
nothing reaches the live topics; bad input gets a clear error and exit code."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from harness.factories import submitted
from harness.media import encode_image, noise_image
from harness.stack import pipeline
from infra.stack import REPO
from producers.replay.plan import from_recorded
from producers.replay.runner import Replay, Target
from producers.replay.source import read_recorded
from runtime.kafka_ranges import partitions_of, stop_consumer
from runtime.kafka_topics import ensure_topics
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.codec import encode
from schemas.flywheel import (
    Candidate,
    EvalItem,
    EvalSetManifest,
    ItemTurn,
    MediaItem,
    RunManifest,
    SetKind,
    TurnResult,
    read_jsonl,
    write_jsonl,
)
from schemas.ids import now_ms
from schemas.topics import REGISTRY, TURNS_SUBMITTED
from workers.inference.engines.fake_engine import FakeEngine

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def replay_pipeline(services, session_namespace):
    """A candidate's pipeline (fake engine) in a replay namespace of its own."""
    settings = Settings.from_env(namespace=f"replay-{session_namespace}", edge_port=0)
    async with pipeline(settings, FakeEngine(token_interval_s=0.002)) as running:
        yield running


async def end_offsets(bootstrap: str, namespace: str) -> dict[str, int]:
    """Every topic's total end offset in a namespace: what was ever written there."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        totals = {}
        for spec in REGISTRY:
            topic = spec.full_name(namespace)
            partitions = await partitions_of(consumer, topic)
            assert partitions, topic
            tps = [TopicPartition(topic, p) for p in partitions]
            ends = await consumer.end_offsets(tps) if tps else {}
            totals[topic] = sum(ends.values())
        return totals
    finally:
        await stop_consumer(consumer)


async def run_cli(*args: str, namespace: str = "") -> subprocess.CompletedProcess[str]:
    """The CLI in a child process, off the event loop (the pipeline under test runs on it)."""
    env = {**os.environ, "TURNSTREAM_NAMESPACE": namespace, "PYTHONUNBUFFERED": "1"}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "producers.replay", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


async def test_a_recorded_slice_replays_in_its_own_namespace_only(
    services, session_namespace, replay_pipeline
):
    live = f"{session_namespace}-live-{uuid.uuid4().hex[:6]}"
    await ensure_topics(services.kafka_bootstrap, live)
    start = now_ms()
    recorded = [
        submitted("a1", conversation_id="c1", text="Hello there", submitted_at_ms=start),
        submitted("b1", conversation_id="c2", text="Other talk", submitted_at_ms=start + 1),
        submitted("a2", conversation_id="c1", text="And again", submitted_at_ms=start + 2),
        submitted("x1", conversation_id="c3", text="Not ours", tenant_id="other"),
    ]
    producer = AIOKafkaProducer(bootstrap_servers=services.kafka_bootstrap)
    await producer.start()
    topic = TURNS_SUBMITTED.full_name(live)
    try:
        for turn in recorded:
            await producer.send_and_wait(topic, encode(turn), key=turn.conversation_id.encode())
        await producer.send_and_wait(topic, b"\x00not an event", key=b"c1")
    finally:
        await producer.stop()
    before = await end_offsets(services.kafka_bootstrap, live)

    turns, unreadable = await read_recorded(
        services.kafka_bootstrap, topic, start_ms=start - 60_000, end_ms=now_ms() + 1000
    )
    assert unreadable == 1
    plan = from_recorded(turns, tenant="acme")
    settings = replay_pipeline.settings
    redis = redis_client(settings.redis_url)
    target = Target.of(settings, redis, edge_id="replay-probe")
    progress: list[str] = []
    replay = Replay(
        target, run_id="slice1", candidate=Candidate(name="same"), progress=progress.append
    )
    try:
        results = await replay.run(plan)
    finally:
        await redis.aclose()

    by_source = {r.item_id: r for r in results}
    assert set(by_source) == {"a1", "a2", "b1"}  # the other tenant's turn is not in the slice
    assert all(r.error_code == "" and r.run_id == "slice1" for r in results)
    # c1's second turn was played after its first, on the candidate's own history
    assert by_source["a2"].text.startswith("You said: And again (turn 2")
    assert by_source["a1"].text.startswith("You said: Hello there (turn 1")
    assert any("3/3 turns" in line for line in progress)
    assert await end_offsets(services.kafka_bootstrap, live) == before  # live untouched


def make_set(folder: Path) -> Path:
    """A two-item eval set version written by hand: a two-turn conversation and an image."""
    version = folder / "tiny" / "v1"
    (version / "media").mkdir(parents=True)
    png = encode_image(noise_image(64, 48), "PNG")
    digest = hashlib.sha256(png).hexdigest()
    (version / "media" / f"{digest}.png").write_bytes(png)
    items = [
        EvalItem(
            item_id="memory",
            kind=SetKind.GOLDEN,
            turns=[ItemTurn(text="My name is Ann."), ItemTurn(text="What is my name?")],
            reference="Ann",
        ),
        EvalItem(
            item_id="picture",
            kind=SetKind.MULTIMODAL,
            turns=[
                ItemTurn(
                    text="Describe this.",
                    media=[MediaItem(kind="image", path=f"media/{digest}.png", sha256=digest)],
                )
            ],
        ),
    ]
    sha = write_jsonl(version / "items.jsonl", items)
    manifest = EvalSetManifest(
        name="tiny",
        version="v1",
        kind=SetKind.GOLDEN,
        created_at="2026-11-30",
        items=2,
        items_sha256=sha,
    )
    (version / "manifest.json").write_bytes(msgspec.json.encode(manifest))
    return version


async def test_an_eval_set_replays_through_the_cli(replay_pipeline, tmp_path):
    version = make_set(tmp_path / "sets")
    out = tmp_path / "runs"
    done = await run_cli(
        "--set",
        str(version),
        "--namespace",
        replay_pipeline.settings.namespace,
        "--run-id",
        "set1",
        "--name",
        "terse",
        "--max-tokens",
        "64",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = msgspec.json.decode((out / "set1" / "run.json").read_bytes(), type=RunManifest)
    assert (manifest.source, manifest.turns, manifest.completed) == ("tiny/v1", 3, 3)
    assert manifest.candidate.name == "terse" and manifest.candidate.max_tokens == 64
    results = {
        (r.item_id, r.index): r for r in read_jsonl(out / "set1" / "results.jsonl", TurnResult)
    }
    assert results[("memory", 1)].text.startswith("You said: What is my name? (turn 2")
    assert results[("memory", 1)].scored and not results[("memory", 0)].scored
    assert "1 images" in results[("picture", 0)].text  # the set's image reached the model


async def test_bad_input_gets_a_clear_error_and_exit_code(services, tmp_path):
    live = "live-ns"
    refused = await run_cli("--set", str(tmp_path), "--namespace", live, namespace=live)
    assert refused.returncode == 2 and "live one" in refused.stderr

    typo = await run_cli("--topic", "turns.submited", "--namespace", "replay-typo")
    assert typo.returncode == 2 and "unknown topic 'turns.submited'" in typo.stderr

    version = make_set(tmp_path / "sets")
    with (version / "items.jsonl").open("a") as items:
        items.write('{"item_id": "sneaked", "kind": "golden", "turns": [{"text": "hi"}]}\n')
    tampered = await run_cli("--set", str(version), "--namespace", "replay-tampered")
    assert tampered.returncode == 2 and "changed since the set was built" in tampered.stderr


async def test_a_candidate_that_is_down_times_out_clearly(services, tmp_path):
    version = make_set(tmp_path / "sets")
    namespace = f"replay-down-{uuid.uuid4().hex[:6]}"  # topics, but no workers
    down = await run_cli(
        "--set",
        str(version),
        "--namespace",
        namespace,
        "--run-id",
        "down1",
        "--turn-timeout-s",
        "2",
        "--out",
        str(tmp_path / "runs"),
    )
    assert down.returncode == 1 and "no turn was answered" in down.stderr
    results = read_jsonl(tmp_path / "runs" / "down1" / "results.jsonl", TurnResult)
    assert {r.error_code for r in results} == {"replay_timeout"}

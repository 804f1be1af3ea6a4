"""Dead letters on the real Kafka: records a consumer dead-lettered (with the workers' own
`dead_letter`) are listed, shown, and re-driven to their source topic once, however many
times the re-drive runs; the dead-letter metric counts them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaProducer

from infra.stack import REPO
from producers.deadletters.box import read_all
from runtime.kafka_topics import ensure_topics
from runtime.prometheus import REGISTRY
from runtime.settings import Settings, settings_env
from schemas.topics import DEAD_LETTERS, TURNS_SUBMITTED
from workers.runtime.deadletters import dead_letter

pytestmark = pytest.mark.integration


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "producers.deadletters", *args],
        cwd=REPO,
        env={**os.environ, **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def vars_of(letter) -> dict:
    return {
        "partition": letter.partition,
        "offset": letter.offset,
        "key": letter.key,
        "value": letter.value,
    }


def metric(topic: str, code: str) -> float:
    value = REGISTRY.get_sample_value(
        "turnstream_dead_letters_total", {"source_topic": topic, "code": code}
    )
    return value or 0.0


async def test_dead_letters_are_listed_shown_and_redriven_once(services):
    settings = Settings.from_env(namespace=f"dlq-{uuid.uuid4().hex[:6]}")
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    source = TURNS_SUBMITTED.full_name(settings.namespace)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(source, json.dumps({"poison": i}).encode(), key=b"c1")
        records = [  # as a consumer holds them (what dead_letter reads of a record)
            SimpleNamespace(topic=source, **vars_of(r))
            for r in await read_all(settings.kafka_bootstrap, source)
        ]
        before = metric(source, "invalid_turn")
        deadletters = DEAD_LETTERS.full_name(settings.namespace)
        for record, code in zip(records, ["invalid_turn", "other", "invalid_turn"], strict=True):
            await dead_letter(producer, deadletters, record, code, f"cannot read {record.offset}")
    finally:
        await producer.stop()
    assert metric(source, "invalid_turn") == before + 2

    listed = cli(settings, "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[-1] == "(3 waiting, 0 already re-driven)"
    assert cli(settings, "summary").stdout.split("\n")[0].split() == ["2", source, "invalid_turn"]
    shown = json.loads(cli(settings, "show", "0/1").stdout)
    assert shown["value"] == {"poison": 1} and shown["headers"]["error_code"] == "other"
    assert shown["headers"]["source_topic"] == source

    dry = cli(settings, "redrive", "--reason", "invalid_turn", "--dry-run")
    assert dry.stdout.strip() == "would re-drive 2 (already re-driven: 0)"
    first = cli(settings, "redrive", "--reason", "invalid_turn", "--since", "1h")
    assert first.stdout.strip() == "re-drove 2 (already re-driven, skipped: 0)", first.stderr
    again = cli(settings, "redrive", "--reason", "invalid_turn")
    assert again.stdout.strip() == "re-drove 0 (already re-driven, skipped: 2)"

    sent = await read_all(settings.kafka_bootstrap, source)
    redriven = [r for r in sent if r.headers.get("redriven_from")]
    assert sorted(json.loads(r.value)["poison"] for r in redriven) == [0, 2]
    assert all(r.key == b"c1" for r in redriven)
    after = cli(settings, "list", "--topic", "turns.submitted")
    assert after.stdout.splitlines()[-1] == "(1 waiting, 2 already re-driven)"
    assert cli(settings, "list", "--since", "yesterday").returncode == 2

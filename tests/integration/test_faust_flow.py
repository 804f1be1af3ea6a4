"""faust empties its stream queues when a recovery ends, and the records fetched by then
were lost: the fetch position had passed them, and the commit stopped below them for good
(an assembly job restarted after kill -9 lost two turns; a paused broker's rebalance lost
up to four). On the real broker: a job of ours processes every record a cleared queue held.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from runtime.settings import Settings, settings_env

pytestmark = pytest.mark.integration

RECORDS = 12
RESUME_AFTER = 3  # records processed before the flow control is resumed


async def _topic_with_records(bootstrap: str, records: int) -> str:
    topic = f"flowprobe-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for index in range(records):
            await producer.send_and_wait(topic, str(index).encode())
    finally:
        await producer.stop()
    return topic


async def test_records_cleared_from_a_stream_queue_are_still_processed(
    services: Settings, tmp_path
):
    topic = await _topic_with_records(services.kafka_bootstrap, RECORDS)
    out = tmp_path / "processed"
    command = [
        sys.executable,
        "-m",
        "tests.integration.faust_flow_probe",
        topic,
        str(RECORDS),
        str(RESUME_AFTER),
        str(out),
    ]
    env = {**os.environ, **settings_env(services), "PYTHONUNBUFFERED": "1"}
    run = await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, timeout=180
    )
    log = run.stdout + run.stderr
    processed = {int(line) for line in out.read_text().split()} if out.exists() else set()
    # the queue did hold records when it was cleared (else this proves nothing) ...
    assert "cleared from the stream queues" in log, log[-3000:]
    # ... and every one of them was fetched again and processed
    assert processed == set(range(RECORDS)), log[-3000:]
    assert run.returncode == 0

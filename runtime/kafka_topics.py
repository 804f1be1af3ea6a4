"""Create the topics of `schemas.topics.REGISTRY` on the broker (idempotent).

Existing topics are left alone when they match; a partition count below the registry's is
raised (Kafka cannot lower one). `python -m runtime.kafka_topics [--namespace NS]`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic

from runtime.settings import Settings
from schemas.topics import REGISTRY, TopicSpec, all_topics

log = logging.getLogger("turnstream.topics")


def min_insync_replicas(replication_factor: int) -> int:
    """Acknowledged writes (acks=all) survive the loss of any one copy: at 3 copies a write
    needs 2, and one broker down (killed, paused, restarting) stops nothing."""
    return max(1, replication_factor - 1)


async def ensure_topics(
    bootstrap: str,
    namespace: str = "",
    specs: tuple[TopicSpec, ...] = REGISTRY,
    *,
    replication_factor: int = 1,
) -> list[str]:
    """Make every topic of `specs` exist with at least its partitions, `replication_factor`
    copies of each; return the created names."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = {spec.full_name(namespace): spec for spec in specs}
        missing = [
            NewTopic(
                name=name,
                num_partitions=spec.partitions,
                replication_factor=replication_factor,
                topic_configs={
                    "retention.ms": str(spec.retention_ms),
                    "min.insync.replicas": str(min_insync_replicas(replication_factor)),
                },
            )
            for name, spec in wanted.items()
            if name not in existing
        ]
        if missing:
            await admin.create_topics(missing)
        present = [n for n in wanted if n in existing]
        if present:
            await _grow_partitions(admin, {n: wanted[n] for n in present})
        return [t.name for t in missing]
    finally:
        await admin.close()


async def _grow_partitions(admin: AIOKafkaAdminClient, specs: dict[str, TopicSpec]) -> None:
    described = await admin.describe_topics(list(specs))
    grow = {
        d["topic"]: NewPartitions(total_count=specs[d["topic"]].partitions)
        for d in described
        if len(d["partitions"]) < specs[d["topic"]].partitions
    }
    if grow:
        await admin.create_partitions(grow)


def main() -> None:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--namespace", default=settings.namespace)
    parser.add_argument("--bootstrap", default=settings.kafka_bootstrap)
    args = parser.parse_args()
    specs = all_topics(settings.pool_names)
    created = asyncio.run(
        ensure_topics(
            args.bootstrap,
            args.namespace,
            specs,
            replication_factor=settings.kafka_replication_factor,
        )
    )
    for spec in specs:
        name = spec.full_name(args.namespace)
        state = "created" if name in created else "present"
        print(
            f"  {name:32} partitions={spec.partitions:<3} "
            f"replicas={settings.kafka_replication_factor} {state}"
        )


if __name__ == "__main__":
    main()

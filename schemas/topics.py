"""The Kafka topic registry: every topic the system uses, with partitions, key and retention.

Topics are created from this registry by `runtime.kafka_topics` (auto-create is off on the
broker). A namespace prefix isolates test runs and replays from live traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic: its base name, partition count, what its messages are keyed by, retention."""

    name: str
    partitions: int
    key: str
    retention_ms: int
    doc: str

    def full_name(self, namespace: str = "") -> str:
        """The topic's name on the broker, with the run's namespace in front when set."""
        return f"{namespace}.{self.name}" if namespace else self.name


TURNS_SUBMITTED = TopicSpec(
    name="turns.submitted",
    partitions=8,
    key="conversation_id",
    retention_ms=7 * DAY_MS,
    doc="User turns accepted by an edge; keyed by conversation so a conversation stays ordered.",
)
TURNS_ENRICHED = TopicSpec(
    name="turns.enriched",
    partitions=8,
    key="conversation_id",
    retention_ms=7 * DAY_MS,
    doc="Turns after preprocessing (transcripts, image tensors by reference), for inference.",
)
TURNS_COMPLETED = TopicSpec(
    name="turns.completed",
    partitions=8,
    key="conversation_id",
    retention_ms=7 * DAY_MS,
    doc=(
        "Terminal outcome of every turn (stop, length, cancelled, error) with usage and "
        "timings; what the edge saw the user do to it (truncations, speech delivered)."
    ),
)
TRACES = TopicSpec(
    name="traces",
    partitions=8,
    key="conversation_id",
    retention_ms=7 * DAY_MS,
    doc="One joined trace per finished turn (from the traces job), for the ClickHouse sink.",
)
TRACE_TICKS = TopicSpec(
    name="traces.ticks",
    partitions=8,
    key="partition (explicit)",
    retention_ms=3600 * 1000,
    doc="The traces job's own clock: a tick per partition lets it close turns that timed out.",
)
FEEDBACK = TopicSpec(
    name="feedback",
    partitions=8,
    key="conversation_id",
    retention_ms=30 * DAY_MS,
    doc="Users' feedback on answers (thumbs, regenerate, stop, copied code, abandon).",
)
WORKERS_METRICS = TopicSpec(
    name="workers.metrics",
    partitions=3,
    key="worker_id",
    retention_ms=DAY_MS,
    doc="Inference workers' state every few hundred ms (batch, KV cache, queue); ClickHouse "
    "keeps the history, so a day is enough here.",
)
SAFETY_VERDICTS = TopicSpec(
    name="safety.verdicts",
    partitions=8,
    key="turn_id",
    retention_ms=7 * DAY_MS,
    doc="The audit's verdicts on finished turns, for the events log; ClickHouse keeps them. "
    "The input screen's and the output windows' verdicts ride on the turn's own events "
    "(turns.enriched, turns.completed).",
)
SAFETY_ALERTS = TopicSpec(
    name="safety.alerts",
    partitions=1,
    key="turn_id",
    retention_ms=30 * DAY_MS,
    doc="Alerts raised by the safety audit (severe categories, a surge of unsafe turns).",
)
TTS_SEGMENTS = TopicSpec(
    name="tts.segments",
    partitions=8,
    key="turn_id",
    retention_ms=DAY_MS,
    doc="Pieces of streaming answers to speak (workers/tts); audio goes back over Redis.",
)
IMAGES_REQUESTED = TopicSpec(
    name="images.requested",
    partitions=8,
    key="conversation_id",
    retention_ms=7 * DAY_MS,
    doc="Assembled turns that ask for a picture (the router's image_generation intent), for "
    "the image-generation workers (workers/imagegen); progress and the image go over Redis. "
    "With the pools' topics, the record of every assembled turn (the events log reads it).",
)
TOOLS_REQUESTED = TopicSpec(
    name="tools.requested",
    partitions=8,
    key="conversation_id",
    retention_ms=7 * DAY_MS,
    doc="Answers that called the deployment's (MCP) tools: their `turn.completed`, whose "
    "`continuation` is the turn that returns the results, for the tools worker (workers/tools).",
)
DEAD_LETTERS = TopicSpec(
    name="deadletters",
    partitions=1,
    key="source topic",
    retention_ms=30 * DAY_MS,
    doc="Messages a consumer could not decode or handle, with the reason in headers; replayable.",
)

DEFAULT_POOLS = ("chat", "reasoning")
POOL_PARTITIONS = 8  # up to this many workers per pool, each owning partitions of its own


def pool_topic(pool: str) -> TopicSpec:
    """The work queue of one inference pool: the router writes each assembled turn to the
    partition of the worker it chose (a worker owns the partitions Kafka assigns it). It is
    also the turn's only `turn.assembled` record (kept as long as the other turn topics)."""
    return TopicSpec(
        name=f"inference.{pool}",
        partitions=POOL_PARTITIONS,
        key="conversation_id, at the chosen worker's partition",
        retention_ms=7 * DAY_MS,
        doc=f"Assembled turns for the {pool!r} pool, at the partition of the chosen worker: "
        "the work, and the record of how each prompt was built (the events log reads it).",
    )


def assembled_topics(pools: tuple[str, ...] = DEFAULT_POOLS) -> tuple[TopicSpec, ...]:
    """Where every `turn.assembled` is: the work queue it went to (a pool's, or the image
    workers'). One record a turn, not a copy on a topic of its own: the trace reads the
    assembly from the completion, which the worker fills from the record it was given."""
    return (*(pool_topic(pool) for pool in pools), IMAGES_REQUESTED)


REGISTRY: tuple[TopicSpec, ...] = (
    TURNS_SUBMITTED,
    TURNS_ENRICHED,
    TURNS_COMPLETED,
    TRACES,
    TRACE_TICKS,
    FEEDBACK,
    WORKERS_METRICS,
    SAFETY_VERDICTS,
    SAFETY_ALERTS,
    TTS_SEGMENTS,
    IMAGES_REQUESTED,
    TOOLS_REQUESTED,
    DEAD_LETTERS,
    *(pool_topic(pool) for pool in DEFAULT_POOLS),
)


def all_topics(pools: tuple[str, ...] = DEFAULT_POOLS) -> tuple[TopicSpec, ...]:
    """The registry plus the topics of any configured pool beyond the default ones."""
    extra = tuple(pool_topic(p) for p in pools if p not in DEFAULT_POOLS)
    return REGISTRY + extra

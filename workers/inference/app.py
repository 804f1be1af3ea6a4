"""Wiring of the inference worker: settings → engine, Kafka, Redis → running service."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from moderation.output_gate import GateConfig, Policy, tier_policies
from runtime.settings import Settings
from runtime.state_board import StateBoard
from schemas.ids import now_ms
from schemas.topics import TTS_SEGMENTS, WORKERS_METRICS, pool_topic
from workers.inference.engines.engine import Engine, options_tag
from workers.inference.engines.engine_profile import EngineProfile, batch_seats, turns_held
from workers.inference.images.image_budget import ImageBudget
from workers.inference.images.image_cache import ImageCache
from workers.inference.images.pixels import PixelLoader
from workers.inference.kv_mirror import KvMirror, kv_event_source
from workers.inference.metrics import MetricsPublisher
from workers.inference.service import InferenceService, ServiceConfig
from workers.inference.speech.segments import SegmenterConfig
from workers.inference.state_board import inference_state
from workers.runtime.clients import WorkerClients
from workers.runtime.running import RunningService

log = logging.getLogger("turnstream.inference")

CONSUMER_GROUP = "inference"


def build_engine(settings: Settings) -> Engine:
    """The configured engine: real vLLM by default, the fake for pipeline benchmarks."""
    if settings.engine == "fake":
        from workers.inference.engines.fake_engine import FakeEngine

        return FakeEngine(token_interval_s=settings.fake_token_interval_ms / 1000)
    from runtime.smollm2 import default_model_dir

    path = settings.model_path or str(default_model_dir(settings))
    if settings.engine == "transformers":
        return _transformers_engine(settings, path)
    from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

    engine = VllmEngine(
        VllmOptions(
            model_path=path,
            model_name=settings.model_name,
            kv_cache_bytes=settings.kv_cache_bytes,
            max_images_per_prompt=settings.max_images_per_turn,
            kv_events=settings.kv_events,
            profile=EngineProfile.from_settings(settings),  # dtype and limits too
        )
    )
    log.info("vLLM engine options in force: %s", engine.profile.tag())
    return engine


def _transformers_engine(settings: Settings, path: str) -> Engine:
    """transformers' own continuous batching: no vLLM needed (hf_engine.py)."""
    from workers.inference.engines.hf_engine import TransformersEngine, TransformersOptions

    return TransformersEngine(
        TransformersOptions(
            model_path=path,
            model_name=settings.model_name,
            device=settings.hf_device,
            dtype=settings.dtype,
            attention=settings.hf_attention,
            kv_cache_bytes=settings.kv_cache_bytes,
            block_size=settings.hf_block_size,
            max_batch_tokens=settings.hf_max_batch_tokens,
            max_model_len=settings.max_model_len,
            max_num_seqs=batch_seats(settings),
        )
    )


RunningWorker = RunningService[InferenceService]


def output_gate_config(settings: Settings, policy: str | None = None) -> GateConfig | None:
    """The incremental output check's policy (None: off); `policy` overrides the default."""
    policy = policy or settings.safety_output_policy
    if policy == "off":
        return None
    return GateConfig(
        policy=Policy(policy),
        window_tokens=settings.safety_window_tokens,
        overlap_tokens=settings.safety_window_overlap,
        deadline_ms=settings.safety_deadline_ms,
        first_window_tokens=min(settings.safety_first_window_tokens, settings.safety_window_tokens),
    )


@contextlib.asynccontextmanager
async def run_worker(settings: Settings, engine: Engine) -> AsyncIterator[RunningWorker]:
    """Start the worker's tasks; on exit drain in-flight turns and close every client."""
    clients = WorkerClients.build(settings, CONSUMER_GROUP, pool_topic(settings.pool))
    seats = batch_seats(settings)
    service = InferenceService(
        engine=engine,
        redis=clients.redis,
        producer=clients.producer,
        relay=clients.relay,
        pixels=PixelLoader(
            clients.blobs,
            ImageCache(
                max_bytes=settings.image_cache_bytes,
                per_user_bytes=settings.image_cache_user_bytes,
            ),
        ),
        image_budget=ImageBudget(settings.max_prefill_images),
        outcomes=clients.outcomes,
        names=clients.names,
        config=ServiceConfig(
            worker_id=clients.worker_id,
            pool=settings.pool,
            max_queued_per_conversation=settings.max_queued_per_conversation,
            output_gate=output_gate_config(settings),
            tier_gates={
                tier: output_gate_config(settings, policy)
                for tier, policy in tier_policies(settings.safety_output_policy_by_tier).items()
            },
            speech_topic=clients.topic(TTS_SEGMENTS),
            segments=SegmenterConfig(
                min_chars=settings.tts_segment_min_chars,
                max_chars=settings.tts_segment_max_chars,
                first_hard_max_chars=settings.tts_first_segment_max_chars,
            ),
            engine_options=options_tag(engine),
            prefix_cache_per_tenant=settings.prefix_cache_per_tenant,
            seats=seats,
            reserved_seats=min(settings.reserved_seats, seats // 4),
            reserved_priority=settings.reserved_seats_priority,
            kv_headroom=settings.kv_headroom,
        ),
        clock_ms=now_ms,
    )
    # fetched past the batch: the waiting turns are seated by tier here, not kept in Kafka
    loop = clients.consume_loop(service.handle, service.fail_turn, turns_held(settings))
    background = {"cancels": service.listen_for_cancels()}
    if settings.metrics_interval_ms > 0:
        metrics = MetricsPublisher(
            engine=engine,
            gauges=service.gauges,
            producer=clients.producer,
            topic=clients.topic(WORKERS_METRICS),
            worker_id=clients.worker_id,
            pool=settings.pool,
            interval_s=settings.metrics_interval_ms / 1000,
            clock_ms=now_ms,
        )
        background["metrics"] = metrics.run()
    mirror = None
    source = kv_event_source(engine)
    if source is not None and settings.worker_state_interval_ms > 0:
        mirror = KvMirror(
            source=source,
            redis=clients.redis,
            key=clients.names.kv_blocks_key(settings.pool, clients.worker_id),
            flush_s=settings.kv_events_flush_ms / 1000,
            ttl_s=settings.worker_state_ttl_ms / 1000,
        )
        background["kv_mirror"] = mirror.run()
    if settings.worker_state_interval_ms > 0:
        board = StateBoard(
            redis=clients.redis,
            key=clients.names.worker_states_key(settings.pool),
            worker_id=clients.worker_id,
            state=inference_state(
                service=service,
                engine=engine,
                consumer=clients.consumer,
                topic=clients.input_topic,
                worker_id=clients.worker_id,
                pool=settings.pool,
                capacity=seats,
                clock_ms=now_ms,
                kv_mirror=mirror,
            ),
            interval_s=settings.worker_state_interval_ms / 1000,
            ttl_s=settings.worker_state_ttl_ms / 1000,
        )
        background["state"] = board.run()
    async with clients.run(service, loop, **background) as running:
        yield running

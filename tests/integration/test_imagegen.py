"""Image generation on the real pipeline: edge → Kafka → preprocessing (input screen) →
assembly (the semantic router's image_generation rule) → `images.requested` → the image
worker running a real diffusers pipeline (a tiny one with random weights, built from configs:
harness/tiny_diffusion.py) → progress and the PNG over Redis → the client; the trace
(traces job, then the ClickHouse sink in a process of its own) records prompt, steps, seed.

Also: without a live image worker the turn is answered at once with a clear error; a cancel
stops the pipeline mid-way with one terminal state; absurd sizes and step counts are
clamped with a notice; a prompt the image rules refuse ends with finish reason safety."""

from __future__ import annotations

import asyncio
import io

import pytest
from PIL import Image

from harness.chdb import sink_trace_rows
from harness.factories import new_conversation_id as conv
from harness.kafka import completions_of, turn_event
from harness.media import PORTRAIT
from harness.polling import eventually
from harness.stack import pipeline, running_job
from harness.tiny_diffusion import build_tiny_diffusion
from moderation.image_screen import ImageScreen
from runtime.settings import Settings
from runtime.state_board import read_states
from schemas.events import TurnCompleted
from workers.imagegen.app import load_pipeline, run_imagegen_worker
from workers.imagegen.presence import POOL
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient
from ws_edge.messages import ImageOptions, ResponseDone, ResponseImage, ResponseImageProgress

pytestmark = pytest.mark.integration

MAX_STEPS = 200


@pytest.fixture(scope="module")
def image_settings(services: Settings, session_namespace: str, test_models_dir) -> Settings:
    model = build_tiny_diffusion(test_models_dir / "tiny-sd-v1")
    return Settings.from_env(
        namespace=f"{session_namespace}-img",
        edge_port=0,
        imagegen_model_path=str(model),
        imagegen_width=64,
        imagegen_height=48,
        imagegen_steps=4,
        imagegen_min_side=16,
        imagegen_max_side=128,
        imagegen_max_steps=MAX_STEPS,
        imagegen_preview_every=2,
        imagegen_preview_side=16,
    )


@pytest.fixture(scope="module")
async def stack(image_settings: Settings):
    """Edge, preprocessing, assembly, safety and a fake text engine; no image worker yet."""
    async with pipeline(image_settings, FakeEngine(token_interval_s=0.005)) as running:
        yield running


@pytest.fixture(scope="module")
async def image_worker(stack, image_settings: Settings):
    """The image worker on the tiny pipeline, live on its board (the router sends to it)."""
    tiny = await asyncio.to_thread(load_pipeline, image_settings)
    async with run_imagegen_worker(image_settings, tiny) as running:
        service = running.service

        async def live() -> bool:
            board = await read_states(service.redis, service.names.worker_states_key(POOL))
            return any(s.partitions for s in board)

        await eventually(live, timeout_s=60)
        yield running


async def test_without_an_image_worker_a_picture_request_is_answered_at_once(stack):
    async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
        answer = await client.draw(conv(), "draw a picture of a cat")
    assert answer.done is not None and answer.done.error is not None
    assert answer.done.finish_reason == "error"
    assert answer.done.error.code == "image_generation_unavailable"
    assert answer.done.error.retryable
    assert answer.images == [] and answer.progress == []


async def test_a_picture_streams_its_steps_then_the_image_and_is_traced(
    stack, image_worker, image_settings, tmp_path
):
    async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
        answer = await client.draw(conv(), "Can you draw me a picture of a cat?")
    done = answer.done
    assert done is not None and done.error is None, done
    assert done.finish_reason == "stop"
    assert "a picture of a cat" in done.text and "64x48" in done.text
    assert [p.step for p in answer.progress] == [0, 1, 2, 3, 4]
    assert {(p.steps, p.width, p.height) for p in answer.progress} == {(4, 64, 48)}
    assert [p.step for p in answer.progress if p.preview] == [2]  # every 2nd, not the last
    preview = next(p for p in answer.progress if p.preview)
    assert preview.preview_format == "jpeg"
    assert answer.progress[0].notice == ""
    assert len(answer.images) == 1
    png = answer.png()
    image = Image.open(io.BytesIO(png))
    assert (image.format, image.size) == ("PNG", (64, 48))
    # stored in the blob store under its hash, for the time media are kept
    stored = await image_worker.service.blobs.get(answer.images[0].sha256)
    assert stored == png

    async with running_job(image_settings, "traces"):
        columns = (
            "pool, intent, model, finish_reason, image_prompt, image_width, image_height, "
            "image_steps, image_steps_done, image_seed, image_generate_ms, e2e_ms"
        )
        args = (tmp_path / "home", image_settings.namespace, answer.turn_id, columns)
        [row] = await asyncio.to_thread(sink_trace_rows, *args)
    pool, intent, model, finish, prompt, width, height, steps, done_steps, seed, gen_ms, e2e = row
    assert (pool, intent, model, finish) == ("imagegen", "image_generation", "tiny-sd-v1", "stop")
    assert (prompt, width, height, steps, done_steps) == ("a picture of a cat", 64, 48, 4, 4)
    assert seed == answer.images[0].seed
    assert 0 < gen_ms <= e2e


async def test_the_same_seed_draws_the_same_picture(stack, image_worker):
    options = ImageOptions(width=32, height=32, steps=2, seed=1234)
    async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
        first = await client.draw(conv(), "draw a lighthouse", image=options)
        second = await client.draw(conv(), "draw a lighthouse", image=options)
        other = await client.draw(
            conv(), "draw a lighthouse", image=ImageOptions(width=32, height=32, steps=2, seed=1)
        )
    assert first.images[0].seed == 1234
    assert first.png() == second.png()
    assert first.png() != other.png()


async def test_absurd_sizes_and_steps_are_clamped_with_a_notice(stack, image_worker):
    options = ImageOptions(width=100_000, height=10, steps=1_000_000)
    async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
        answer = await client.draw(conv(), "generate an image of a red fox", image=options)
    assert answer.done is not None and answer.done.finish_reason == "stop", answer.done
    first = answer.progress[0]
    assert (first.step, first.steps, first.width, first.height) == (0, MAX_STEPS, 128, 16)
    assert "Asked for 100000x10; made 128x16" in first.notice
    assert f"Asked for 1000000 steps; ran {MAX_STEPS}" in first.notice
    assert first.notice in answer.done.text
    assert Image.open(io.BytesIO(answer.png())).size == (128, 16)
    assert answer.progress[-1].step == MAX_STEPS


async def test_a_cancel_stops_the_picture_within_a_step(stack, image_worker, image_settings):
    async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
        turn_id = await client.start_turn(
            conv(), "draw a mountain lake", image=ImageOptions(steps=MAX_STEPS)
        )
        events = []
        async for event in client.events(turn_id):
            events.append(event)
            if isinstance(event, ResponseImageProgress) and event.step == 1:
                await client.cancel(turn_id)
    done = events[-1]
    assert isinstance(done, ResponseDone) and done.finish_reason == "cancelled"
    assert not any(isinstance(e, ResponseImage) for e in events)
    steps = [e.step for e in events if isinstance(e, ResponseImageProgress)]
    assert 1 <= steps[-1] < MAX_STEPS  # stopped well before the end
    assert sum(isinstance(e, ResponseDone) for e in events) == 1
    assert await completions_of(image_settings, turn_id) == 1
    # the worker is free again: the next picture is drawn
    async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
        after = await client.draw(conv(), "draw a boat")
    assert after.done is not None and after.done.finish_reason == "stop"


async def test_a_picture_the_safety_checks_refuse_is_never_drawn(stack, image_worker):
    """Refused by the input screen's category classifier (violence) before the image rules
    see it; `prompt_check` alone refuses it too (tests/unit/workers/imagegen/test_imagegen.py)."""
    async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
        answer = await client.draw(conv(), "draw a gory picture of a decapitated man")
    done = answer.done
    assert done is not None and done.finish_reason == "safety"
    assert done.error is not None and done.error.code in ("input_blocked", "image_blocked")
    assert done.error.message and "decapitated" not in done.error.message
    assert answer.images == [] and answer.progress == []


async def test_an_ordinary_question_about_images_is_not_a_picture_request(stack, image_worker):
    async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
        done = await client.ask(conv(), "how are images generated by diffusion models?")
    assert done.finish_reason == "stop" and done.model != image_worker.service.pipeline.model_name


class _Portrait:
    """Stands in for the diffusion pipeline's result: a real photo with a face (the tiny
    pipeline draws noise, in which the detector finds nothing)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):  # everything else (name, geometry) is the real pipeline's
        return getattr(self.inner, name)

    def generate(self, job, *, guidance, on_step):
        self.inner.generate(job, guidance=guidance, on_step=on_step)
        return Image.open(PORTRAIT).convert("RGB")  # full size: the tiny sizes hide the face


async def test_a_generated_picture_the_detector_stops_is_never_shown(stack, image_worker):
    """The real detector on the result; the face class is declared explicit for the test
    (no explicit picture is kept in the repo), so this portrait is what it stops."""
    service = image_worker.service
    real_pipeline, real_screen = service.pipeline, service.image_screen
    assert real_screen is not None  # image screening is on by default
    service.pipeline = _Portrait(real_pipeline)
    service.image_screen = ImageScreen(real_screen.model, explicit=frozenset({"FACE_FEMALE"}))
    try:
        async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
            withheld = await client.draw(conv(), "draw a portrait of a woman in uniform")
        service.image_screen = real_screen
        async with EdgeClient.connect(stack.url, stack.token("ida")) as client:
            shown = await client.draw(conv(), "draw a portrait of a woman in uniform")
    finally:
        service.pipeline, service.image_screen = real_pipeline, real_screen
    done = withheld.done
    assert done is not None and done.finish_reason == "safety"
    assert done.error is not None and done.error.code == "image_blocked"
    assert withheld.images == []  # neither shown nor stored
    assert shown.done is not None and shown.done.finish_reason == "stop"
    assert len(shown.images) == 1
    record = await turn_event(stack.settings, "turns.completed", done.turn_id)
    assert isinstance(record, TurnCompleted) and record.image is not None
    assert record.image.screening is not None
    assert record.image.screening.action == "block"
    assert record.image.screening.scores["FACE_FEMALE"] > 0.5

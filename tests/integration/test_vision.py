"""Native multimodal inference on vLLM: a tiny LLaVA built locally (random weights, our
preprocessing geometry) reads the pixel tensors our preprocessor made, through the engine
directly and through the whole pipeline; text-only models refuse images clearly."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from harness.media import encode_image, noise_image
from harness.stack import pipeline
from runtime.settings import Settings
from schemas.events import DecodingParams, FinishReason, ImageInput, Message, Role
from workers.inference.engines.engine import GenerationRequest
from workers.preprocess.images import ImageLimits, preprocess_image
from ws_edge.client import EdgeClient, image_part

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

GREEDY = DecodingParams(max_tokens=12, temperature=0.0)


@pytest.fixture(scope="module")
async def llava_engine(test_models_dir):
    from harness.tiny_vlm import build_tiny_llava
    from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

    path = build_tiny_llava(test_models_dir / "tiny-llava-v1")
    engine = VllmEngine(
        VllmOptions(
            model_path=str(path),
            model_name="tiny-llava",
            max_model_len=2048,
            kv_cache_bytes=128 * 1024 * 1024,
            max_num_seqs=8,
        )
    )
    yield engine
    await engine.close()


def picture(seed: int) -> tuple[ImageInput, np.ndarray]:
    data = encode_image(noise_image(200, 150, seed), "PNG")
    image = preprocess_image(data, ImageLimits())
    ref = ImageInput(
        sha256=image.sha256,
        tensor_key=f"px:336:14:{image.sha256}",
        width=image.width,
        height=image.height,
        num_patches=image.num_patches,
    )
    return ref, image.pixel_values


async def answer(engine, seed: int, request_id: str) -> tuple[str, int]:
    ref, pixels = picture(seed)
    request = GenerationRequest(
        request_id=request_id,
        messages=[Message(Role.USER, "<image_1>\nwhat is in the picture")],
        decoding=GREEDY,
        images=[ref],
        pixels=[pixels],
    )
    deltas = [d async for d in engine.stream(request)]
    return "".join(d.text for d in deltas), deltas[-1].prompt_tokens


async def test_the_engine_reads_our_pixel_tensors(llava_engine):
    assert llava_engine.accepts_images and llava_engine.vision.tokens_per_image == 576
    first, prompt_tokens = await answer(llava_engine, 1, "img-a")
    again, _ = await answer(llava_engine, 1, "img-b")
    other, _ = await answer(llava_engine, 2, "img-c")
    assert first and first == again  # greedy: same picture, same answer
    assert other != first  # the answer depends on the pixels: they reached the model
    assert prompt_tokens > 576  # the image token expanded to its 576 feature positions


async def test_an_image_turn_through_the_pipeline(services, session_namespace, llava_engine):
    # the tiny LLaVA has random weights: its answer is token soup, and the output check may
    # read soup as harm. Without a penalty the soup is the one this test has always seen.
    settings = Settings.from_env(
        namespace=f"{session_namespace}-llava", edge_port=0, default_frequency_penalty=0.0
    )
    photo = encode_image(noise_image(320, 240, 5), "JPEG", quality=90)
    async with pipeline(settings, llava_engine) as p:
        cache = p.worker.service.pixels.cache
        conversation = f"c-{uuid.uuid4().hex[:8]}"
        async with EdgeClient.connect(p.url, p.token()) as client:
            first = await client.ask(conversation, "describe", parts=[image_part(photo)])
            again = await client.ask(f"{conversation}-2", "describe", parts=[image_part(photo)])
            text = await client.ask(conversation, "and now without a picture", max_tokens=8)
    assert first.finish_reason in {FinishReason.STOP, FinishReason.LENGTH}, first.error
    assert first.model == "tiny-llava" and first.usage.prompt_tokens > 576
    assert again.text == first.text  # same picture, same question, greedy
    assert cache.stats.hits >= 1  # the second turn's pixels came from the worker's cache
    # History keeps the placeholder as text: no image slot is left dangling in later turns.
    assert text.finish_reason in {FinishReason.STOP, FinishReason.LENGTH}, text.error


async def test_a_text_only_model_refuses_images_clearly(vllm_pipeline):
    photo = encode_image(noise_image(64, 64, 3), "PNG")
    async with EdgeClient.connect(vllm_pipeline.url, vllm_pipeline.token()) as client:
        done = await client.ask(f"c-{uuid.uuid4().hex[:8]}", "what?", parts=[image_part(photo)])
        after = await client.ask(f"c-{uuid.uuid4().hex[:8]}", "hello", max_tokens=4)
    assert done.finish_reason == FinishReason.ERROR and done.error is not None
    assert done.error.code == "images_unsupported"
    assert after.finish_reason in {FinishReason.STOP, FinishReason.LENGTH}

"""The pure parts of image generation: the request (prompt, clamping, seed), the progress
previews, the image rules, the edge's frames, the log, the trace and the route."""

from __future__ import annotations

import base64
import io

import msgspec
import numpy as np
import pytest
from PIL import Image

from harness.factories import completed, submitted
from schemas.events import (
    ImageGenerated,
    ImageGeneration,
    ImageOptions,
    ImageProgress,
    TurnStarted,
)
from schemas.traces import build_trace
from schemas.turn_log import NOT_LOGGED, log_kind
from stream_jobs.assembly.routing.endpoint_picker import EndpointPicker
from stream_jobs.assembly.routing.route import IMAGE_POOL, Routing
from stream_jobs.assembly.routing.semantic_router import RouterConfig, SemanticRouter
from workers.imagegen.preview import latents_to_rgb, png_bytes, preview_jpeg, wants_preview
from workers.imagegen.request import (
    ImageLimits,
    caption,
    clamp_size,
    clamp_steps,
    from_text,
    plan,
    subject,
    turn_seed,
)
from workers.imagegen.service import prompt_check
from ws_edge.actions import Send, SubmitTurn
from ws_edge.auth import mint_token
from ws_edge.media import MediaLimits
from ws_edge.messages import ResponseImage, ResponseImageProgress
from ws_edge.session import Session, SessionLimits

LIMITS = ImageLimits(width=512, height=512, steps=4, min_side=64, max_side=1024, max_steps=50)

# --- the request ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "prompt"),
    [
        ("draw a cat", "a cat"),
        ("Can you draw me a picture of a cat, please?", "a picture of a cat"),
        ("hey, paint a dog!", "a dog"),
        ("generate a 4000x3000 photo of a sunset in 500 steps", "a photo of a sunset"),
        ("/imagine", "/imagine"),  # nothing after the asking: the whole text
        ("Draw 3 cats on a 3 step staircase", "3 cats on a 3 step staircase"),
    ],
)
def test_the_prompt_is_the_request_without_its_asking(text, prompt):
    assert subject(text) == prompt


def test_sizes_and_steps_said_in_words():
    assert from_text("a 640x480 photo in 8 steps") == ImageOptions(640, 480, 8)
    assert from_text("a photo of 3 dogs") == ImageOptions()


def test_nothing_asked_gets_the_defaults_and_no_notice():
    job = plan("draw a cat", None, LIMITS, "turn-1")
    assert (job.prompt, job.width, job.height, job.steps, job.notice) == ("a cat", 512, 512, 4, "")
    assert job.seed == turn_seed("turn-1") != turn_seed("turn-2")  # fixed by the turn
    assert 0 <= job.seed < 2**63


def test_the_clients_options_win_over_the_text():
    options = ImageOptions(width=256, height=128, steps=2, seed=7)
    job = plan("draw a 640x480 cat in 8 steps", options, LIMITS, "t")
    assert (job.width, job.height, job.steps, job.seed) == (256, 128, 2, 7)


def test_a_huge_size_scales_down_keeping_the_aspect_ratio_with_a_notice():
    (size, notice) = clamp_size(4000, 3000, LIMITS)
    assert size == (1024, 768)
    assert notice == "Asked for 4000x3000; made 1024x768 (the largest side is 1024 px)."


def test_a_tiny_or_thin_size_is_raised_to_the_minimum():
    assert clamp_size(10, 10, LIMITS) == (
        (64, 64),
        "Asked for 10x10; made 64x64 (the smallest side is 64 px).",
    )
    (size, notice) = clamp_size(100_000, 10, LIMITS)
    assert size == (1024, 64) and "largest side" in notice and "smallest side" in notice


def test_sides_round_down_to_the_pipelines_multiple_without_a_notice():
    assert clamp_size(500, 333, LIMITS) == ((496, 328), "")


def test_steps_are_clamped_with_a_notice():
    assert clamp_steps(4, LIMITS) == (4, "")
    assert clamp_steps(5000, LIMITS) == (50, "Asked for 5000 steps; ran 50 (the most).")
    assert clamp_steps(0, LIMITS) == (1, "Asked for 0 steps; ran 1.")


def test_the_caption_says_what_was_drawn_and_what_was_clamped():
    job = plan("draw a cat", ImageOptions(width=9999, height=9999), LIMITS, "t")
    assert caption(job) == (
        "Here is the image you asked for: “a cat” (1024x1024). "
        "Asked for 9999x9999; made 1024x1024 (the largest side is 1024 px)."
    )


# --- progress -------------------------------------------------------------------------------


def test_previews_come_every_nth_step_but_never_with_the_last():
    assert [s for s in range(0, 9) if wants_preview(s, 8, 2)] == [2, 4, 6]
    assert not any(wants_preview(s, 8, 0) for s in range(9))
    assert [s for s in range(0, 5) if wants_preview(s, 4, 1)] == [1, 2, 3]


def test_sd_latents_map_to_rgb_and_a_small_jpeg():
    latents = np.zeros((4, 8, 12), dtype=np.float32)
    latents[0] = 3.0  # channel 0 is mostly luminance: bright
    rgb = latents_to_rgb(latents)
    assert rgb.shape == (8, 12, 3) and rgb.dtype == np.uint8 and rgb.min() > 200
    jpeg = preview_jpeg(latents, max_side=48)
    image = Image.open(io.BytesIO(jpeg))
    assert (image.format, image.size) == ("JPEG", (48, 32))


def test_other_latent_layouts_still_preview():
    rgb = latents_to_rgb(np.random.default_rng(0).normal(size=(16, 4, 4)))
    assert rgb.shape == (4, 4, 3) and rgb.max() == 255 and rgb.min() == 0
    assert latents_to_rgb(np.ones((1, 2, 2))).shape == (2, 2, 3)
    with pytest.raises(ValueError, match="latents"):
        latents_to_rgb(np.ones((4, 4)))


def test_the_delivered_image_is_a_png():
    png = png_bytes(Image.new("RGBA", (10, 6), (255, 0, 0, 128)))
    assert Image.open(io.BytesIO(png)).format == "PNG"


# --- the image rules ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "label"),
    [
        ("a picture of a naked child", "sexual_minors"),
        ("sexy photo of a 12 year old", "sexual_minors"),
        ("a gory picture of a decapitated man", "gore"),
        ("a deepfake of my neighbour undressed", "nonconsensual_imagery"),
        ("nude photos of my ex", "nonconsensual_imagery"),
    ],
)
def test_the_image_rules_refuse(prompt, label):
    verdict = prompt_check().check(prompt)
    assert verdict.stopped and label in verdict.labels


@pytest.mark.parametrize(
    "prompt",
    [
        "a picture of kids playing football",
        "a cat wearing a hat",
        "a nude figure study in charcoal",
        "a knight fighting a dragon",
        "a baby sleeping in a crib",
    ],
)
def test_the_image_rules_let_ordinary_pictures_through(prompt):
    assert not prompt_check().check(prompt).stopped


# --- the edge -------------------------------------------------------------------------------

SECRET = "a-test-secret-that-is-long-enough-for-hs256"


def accepted_turn(**create) -> tuple[Session, SubmitTurn]:
    session = Session(
        session_id="s1",
        edge_id="edge-1",
        auth_secret=SECRET,
        limits=SessionLimits(media=MediaLimits()),
        clock_ms=lambda: 1000.0,
    )
    session.open(mint_token(SECRET, "alice", "acme"))
    frame = msgspec.json.encode({"type": "turn.create", "conversation_id": "c1", **create})
    [submit] = session.receive(frame.decode())
    assert isinstance(submit, SubmitTurn)
    session.submit_succeeded(submit.turn.turn_id)
    return session, submit


def test_turn_create_carries_the_image_options_to_the_worker():
    _, submit = accepted_turn(text="draw a cat", image={"width": 99999, "steps": 3})
    assert submit.turn.image == ImageOptions(width=99999, steps=3)
    _, plain = accepted_turn(text="hello")
    assert plain.turn.image is None


def test_bad_image_options_are_refused_by_the_protocol():
    session, _ = accepted_turn(text="x")
    frame = '{"type":"turn.create","conversation_id":"c2","text":"draw","image":{"steps":0}}'
    [error] = session.receive(frame)
    assert isinstance(error, Send) and error.event.code == "invalid_message"


def test_progress_and_the_image_reach_the_client():
    session, submit = accepted_turn(text="draw a cat")
    turn_id = submit.turn.turn_id
    session.relay(TurnStarted(turn_id=turn_id, worker_id="w", model="sd", attempt="a1"))
    [first] = session.relay(
        ImageProgress(
            turn_id=turn_id, attempt="a1", step=0, steps=4, width=64, height=48, notice="clamped"
        )
    )
    assert first.event == ResponseImageProgress(turn_id, 0, 4, 64, 48, "clamped")
    [step] = session.relay(
        ImageProgress(
            turn_id=turn_id, attempt="a1", step=2, steps=4, width=64, height=48, preview=b"jpg"
        )
    )
    assert step.event.preview == base64.b64encode(b"jpg").decode()
    assert step.event.preview_format == "jpeg"
    stale = ImageProgress(turn_id=turn_id, attempt="old", step=3, steps=4, width=64, height=48)
    assert session.relay(stale) == []  # a step of an attempt that failed over
    image = ImageGenerated(
        turn_id=turn_id, attempt="a1", sha256="ab", width=64, height=48, seed=5, data=b"png"
    )
    [sent] = session.relay(image, position=(1, 7))
    assert sent.event == ResponseImage(
        turn_id, 0, "png", 64, 48, "ab", 5, base64.b64encode(b"png").decode(), 1, 7
    )


def test_the_image_is_logged_for_resumes_and_progress_is_not():
    image = ImageGenerated(
        turn_id="t", attempt="a1", sha256="", width=1, height=1, seed=0, data=b""
    )
    assert log_kind(image) == "a:a1"
    step = ImageProgress(turn_id="t", attempt="a1", step=1, steps=2, width=1, height=1)
    assert log_kind(step) == NOT_LOGGED


# --- the trace ------------------------------------------------------------------------------


def test_the_trace_records_how_the_image_was_made():
    image = ImageGeneration(
        prompt="a cat", width=64, height=48, steps=4, seed=42, steps_done=4, generate_ms=12.5
    )
    row = build_trace(submitted("t"), completed=completed("t", image=image))
    assert (row.image_prompt, row.image_width, row.image_height) == ("a cat", 64, 48)
    assert (row.image_steps, row.image_steps_done, row.image_seed) == (4, 4, 42)
    assert row.image_generate_ms == 12.5 and row.image_notice == ""
    text = build_trace(submitted("u"), completed=completed("u"))
    assert (text.image_prompt, text.image_steps, text.image_seed) == ("", 0, 0)


# --- the route ------------------------------------------------------------------------------


def test_the_image_intent_keeps_its_own_route():
    routing = Routing(
        pools=("chat", "reasoning"),
        intents=SemanticRouter(RouterConfig.default()),
        board=None,
        picker=EndpointPicker("key_hash"),
        clock_ms=lambda: 0.0,
    )
    intent = routing.intent(
        "draw me a picture of a cat", has_images=False, history_turns=0, forced_pool="chat"
    )
    assert (intent.pool, intent.intent) == (IMAGE_POOL, "image_generation")
    plain = routing.intent("what is an image?", has_images=False, history_turns=0)
    assert plain.pool == "chat"

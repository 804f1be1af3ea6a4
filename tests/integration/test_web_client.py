"""The web client (ws_edge/web) end to end in headless Chromium: the page the edge serves
connects, streams an answer, survives a dropped connection (reconnect, re-authenticate,
`response.resume`) without losing or repeating text, stops an answer, records feedback,
regenerates, sends an image and a microphone recording.

Playwright drives Debian's chromium (`/usr/bin/chromium`; Playwright's own browser builds
cannot be downloaded here) against a real pipeline: the edge, Kafka, Redis, the workers and
the fake engine, slowed down so an answer is still streaming when the test acts on it. The
fake engine's answers are known in advance ("You said: <question> (turn N)"), so the text
the page shows is checked against what the engine said, not only against `response.done`.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.media import encode_image, noise_image, quiet_room, spoken, wav16, words
from harness.polling import eventually
from harness.stack import Pipeline, pipeline
from runtime.settings import Settings
from workers.inference.engines.fake_engine import FakeEngine

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (setup.sh)"
    ),
]

TOKEN_INTERVAL_S = 0.08  # slow enough to act on an answer while it streams
LONG_QUESTION = " ".join(f"word{i}" for i in range(50))  # ~55 tokens: ~4 s of streaming
LONGER_QUESTION = " ".join(f"item{i}" for i in range(150))  # ~12 s: to be stopped
SPOKEN_QUESTION = "What is the capital of France?"
WAIT_MS = 60_000  # generous: the machine is shared; no assertion is about speed


def fake_answer(question: str, turn: int = 1, images: int = 0) -> str:
    seen = f", {images} images" if images else ""
    return f"You said: {question} (turn {turn}{seen})"


@pytest.fixture(scope="module")
async def web_pipeline(services: Settings, session_namespace: str) -> AsyncIterator[Pipeline]:
    settings = Settings.from_env(
        namespace=f"{session_namespace}-web",
        edge_port=0,
        max_frame_bytes=3 * 1024 * 1024,
        max_media_bytes=2 * 1024 * 1024,
    )
    async with pipeline(settings, FakeEngine(token_interval_s=TOKEN_INTERVAL_S)) as running:
        yield running


@pytest.fixture(scope="module")
def fake_microphone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A WAV file Chromium plays as the microphone (it loops): quiet, the question, a long
    quiet; and when the question has ended, in seconds."""
    before, speech = quiet_room(0.5), spoken(SPOKEN_QUESTION)
    path = tmp_path_factory.mktemp("mic") / "question.wav"
    path.write_bytes(wav16(np.concatenate([before, speech, quiet_room(8.0, seed=9)])))
    return path, (len(before) + len(speech)) / 16_000


@pytest.fixture(scope="module")
async def browser(fake_microphone: tuple[Path, float]) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    wav, _ = fake_microphone
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--use-fake-ui-for-media-stream",  # grant the microphone without asking
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={wav}",
                "--autoplay-policy=no-user-gesture-required",
            ],
        )
        try:
            yield browser
        finally:
            await browser.close()


class Page:
    """One tab on the client, with the hook (`window.turnstream`) and the page's errors."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.problems: list[str] = []  # uncaught exceptions, console errors (CSP included)
        page.on("pageerror", lambda exc: self.problems.append(f"exception: {exc}"))
        page.on(
            "console",
            lambda msg: (
                self.problems.append(f"console: {msg.text}") if msg.type == "error" else None
            ),
        )

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.problems.append(f"console: {message.text}")

    async def hook(self, expression: str, arg: Any = None) -> Any:
        return await self.page.evaluate(f"(arg) => window.turnstream.{expression}", arg)

    async def wait(self, condition: str, arg: Any = None, timeout_ms: int = WAIT_MS) -> None:
        """Wait for a JS condition on the hook `t` (and `arg`); fail with what the page saw."""
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        try:
            await self.page.wait_for_function(
                f"(arg) => {{ const t = window.turnstream; return {condition}; }}",
                arg=arg,
                timeout=timeout_ms,
            )
        except PlaywrightTimeout:
            seen = await self.page.evaluate(
                """() => { const t = window.turnstream; return {state: t.state, states: t.states,
                errors: t.errors, frames: t.frames.slice(-30), sent: t.sent.slice(-30),
                answers: t.answers, lastPosition: t.lastPosition, done: t.done}; }"""
            )
            pytest.fail(f"timed out waiting for `{condition}` (arg {arg!r}); the page saw {seen}")

    async def ask(self, question: str) -> tuple[Any, str]:
        """Type and send; the new answer element and its turn id once the edge accepted it."""
        answers = self.page.get_by_test_id("answer")
        before = await answers.count()
        await self.page.get_by_test_id("input").fill(question)
        await self.page.get_by_test_id("send").click()
        answer = answers.nth(before)
        await self.wait(
            "document.querySelectorAll('[data-testid=answer]')[arg]?.dataset.turnId !== undefined",
            before,
        )
        return answer, await answer.get_attribute("data-turn-id")

    async def done(self, turn_id: str) -> dict[str, Any]:
        await self.wait("t.done[arg] !== undefined", turn_id)
        return await self.hook("done[arg]", turn_id)


@pytest.fixture
async def client(browser: Any, web_pipeline: Pipeline) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 900, "height": 700})
    page = Page(await context.new_page())
    try:
        await page.page.goto(
            f"http://127.0.0.1:{web_pipeline.edge.port}/?token={web_pipeline.token()}"
        )
        await page.wait("t.state === 'connected'")
        assert "token=" not in page.page.url  # taken out of the address bar
        yield page
        assert page.problems == []
    finally:
        await context.close()


def artefact_paths(tmp_path: Path, name: str) -> list[Path]:
    home = Path(os.environ.get("TURNSTREAM_HOME", Path.home() / ".turnstream"))
    artefacts = home / "artefacts"
    artefacts.mkdir(parents=True, exist_ok=True)
    return [tmp_path / name, artefacts / name]


async def test_an_answer_streams_and_survives_a_dropped_connection(client: Page, tmp_path: Path):
    answer, turn_id = await client.ask(LONG_QUESTION)
    expected = fake_answer(LONG_QUESTION)
    text = answer.get_by_test_id("answer-text")

    # tokens arrive while it streams: the shown text grows, each time by appending
    seen: list[str] = []
    async with asyncio.timeout(WAIT_MS / 1000):
        while len(seen) < 3:
            shown, finished = await client.page.evaluate(
                "([el, id]) => [el.textContent, window.turnstream.done[id] !== undefined]",
                [await text.element_handle(), turn_id],
            )
            assert not finished, f"the answer ended before it was seen streaming: {seen}"
            if shown and (not seen or shown != seen[-1]):
                seen.append(shown)
            await asyncio.sleep(0.03)
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(seen))
    assert all(expected.startswith(shown) for shown in seen)
    assert await answer.get_attribute("data-status") == "streaming"
    assert await answer.get_by_test_id("thumbs-up").is_disabled()  # not before it is done

    # the connection drops mid-answer (checked and done in one step inside the page)
    states_before = len(await client.hook("states"))
    dropped = await client.page.evaluate(
        "id => window.turnstream.done[id] === undefined && window.turnstream.dropConnection()",
        turn_id,
    )
    assert dropped, "the answer had finished before the connection could be dropped"
    shown_at_drop = await client.hook("answers[arg]", turn_id)
    assert shown_at_drop != expected
    await client.wait("t.states.slice(arg).includes('reconnecting')", states_before)
    await client.wait("t.state === 'connected' && t.sessions === 2")

    # resumed from where it was: the whole answer, once, with nothing lost or repeated
    done = await client.done(turn_id)
    assert "response.resume" in await client.hook("sent")
    assert "response.resumed" in await client.hook("frames"), "the edge never answered resume"
    streamed = await client.hook("streamed[arg]", turn_id)
    assert done["finish_reason"] == "stop" and done["error"] is None
    assert done["text"] == expected
    assert streamed == expected, "the deltas shown before response.done were not the answer"
    assert streamed.count("word49") == 1
    assert await text.text_content() == expected
    assert await client.hook("answers[arg]", turn_id) == expected
    assert await answer.get_attribute("data-status") == "done"
    for path in artefact_paths(tmp_path, "web_client.png"):
        await client.page.screenshot(path=str(path), full_page=True)


async def test_stop_cancels_the_answer(client: Page, web_pipeline: Pipeline):
    answer, turn_id = await client.ask(LONGER_QUESTION)
    await client.wait("(t.answers[arg] || '').length > 0", turn_id)  # it streams
    stop = client.page.get_by_test_id("stop")
    assert await stop.is_enabled()
    await stop.click()
    done = await client.done(turn_id)
    assert done["finish_reason"] == "cancelled"
    full = fake_answer(LONGER_QUESTION)
    assert done["text"] and full.startswith(done["text"]) and done["text"] != full
    assert await answer.get_by_test_id("answer-text").text_content() == done["text"]
    assert (await answer.get_by_test_id("answer-status").text_content()).startswith("stopped")
    await eventually(lambda: turn_id in web_pipeline.engine.aborted, timeout_s=WAIT_MS / 1000)
    await client.wait("(t.feedback[arg] || []).includes('stop')", turn_id)  # the quality layer
    await client.wait("document.querySelector('[data-testid=stop]').disabled")


async def test_thumbs_up_is_recorded_and_regenerate_asks_again(client: Page):
    question = "is this any good"
    answer, turn_id = await client.ask(question)
    done = await client.done(turn_id)
    assert done["text"] == fake_answer(question)
    thumbs_up = answer.get_by_test_id("thumbs-up")
    await thumbs_up.click()
    await client.wait("(t.feedback[arg] || []).includes('thumbs_up')", turn_id)
    assert "thumbs_up" in (await answer.get_attribute("data-feedback")).split()
    assert await thumbs_up.get_attribute("aria-pressed") == "true"
    assert "thanks" in await answer.get_by_test_id("feedback-status").text_content()

    await answer.get_by_test_id("regenerate").click()
    await client.wait("(t.feedback[arg] || []).includes('regenerate')", turn_id)
    answers = client.page.get_by_test_id("answer")
    await client.wait(
        "document.querySelectorAll('[data-testid=answer]')[1]?.dataset.turnId !== undefined"
    )
    again_id = await answers.nth(1).get_attribute("data-turn-id")
    assert again_id != turn_id
    again = await client.done(again_id)
    assert again["text"] == fake_answer(question, turn=2)  # same conversation, asked again


async def test_an_image_is_sent_with_the_question(client: Page):
    png = encode_image(noise_image(64, 48), "PNG")
    await client.page.get_by_test_id("image-input").set_input_files(
        files=[{"name": "noise.png", "mimeType": "image/png", "buffer": png}]
    )
    await client.wait("document.querySelectorAll('[data-testid=attachments] img').length === 1")
    _, turn_id = await client.ask("what is in it")
    done = await client.done(turn_id)
    assert done["error"] is None, done
    # the fake engine echoes the prompt, in which the image stands as a placeholder
    assert done["text"].endswith("what is in it (turn 1, 1 images)")


async def test_the_microphone_is_streamed_as_16khz_pcm(
    client: Page, fake_microphone: tuple[Path, float]
):
    _, speech_ends_s = fake_microphone
    mic = client.page.get_by_test_id("mic")
    await mic.click()
    await client.wait("t.micSeconds > arg", speech_ends_s + 0.8)  # the question, then quiet
    await mic.click()
    await client.wait("document.querySelector('[data-testid=answer]')?.dataset.turnId")
    turn_id = await client.page.get_by_test_id("answer").first.get_attribute("data-turn-id")
    assert await client.hook("sent.filter(type => type === 'audio.append').length") > 1
    done = await client.done(turn_id)
    assert done["error"] is None, done
    heard = await client.page.get_by_test_id("heard").first.text_content()
    assert {"capital", "france"} <= set(words(heard))  # downsampled right, or ASR would not
    assert {"capital", "france"} <= set(words(done["text"]))

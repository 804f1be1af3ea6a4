"""The HTTP door on the real pipeline (Kafka, Redis, the workers, the fake engine), driven by
clients nobody here wrote: the official `openai` SDK (sync and async, streamed and not,
`with_raw_response`, its errors) and `curl -N`; the resume path by `Last-Event-ID` on another
edge node, with no gap and no duplicate; cancel; server-side and carried histories."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from harness.board import write_load
from harness.factories import new_conversation_id as conv
from harness.media import encode_image, espeak_wav, noise_image, quiet_room, wav16
from harness.polling import eventually
from harness.sockets import tiny_socket
from harness.stack import another_edge
from runtime import prometheus as prom
from runtime.kafka_topics import ensure_topics
from runtime.settings import Settings, settings_env
from workers.preprocess.audio_decode import decode_audio
from ws_edge.api_keys import key_id
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient
from ws_edge.server import EdgeServer

pytestmark = pytest.mark.integration

# the fake engine echoes the question word by word at 5 ms a word: ~5 s of answer, all of
# it inside max_tokens
LONG_QUESTION = " ".join(f"{i % 10}z" for i in range(900))


LONG_STREAM = {
    "model": "m",
    "messages": [{"role": "user", "content": LONG_QUESTION}],
    "max_tokens": 1000,
    "stream": True,
}


def base_url(edge: EdgeServer) -> str:
    return f"http://127.0.0.1:{edge.http_port}/v1"


def echo(text: str, turn: int = 1) -> str:
    """What the fake engine answers."""
    return f"You said: {text} (turn {turn})"


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str | None, str]]:
    """(id, data) of each event of a Server-Sent Events body (comments skipped)."""
    event_id, data = None, []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event_id, "\n".join(data)
            event_id, data = None, []
        elif line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])


def content_of(data: str) -> str:
    chunk = json.loads(data)
    return "".join(c["delta"].get("content") or "" for c in chunk.get("choices", []))


async def test_the_openai_sdk_gets_whole_and_streamed_answers(fake_pipeline):
    client = openai.AsyncOpenAI(
        base_url=base_url(fake_pipeline.edge), api_key=fake_pipeline.token("sdk"), max_retries=0
    )
    whole = await client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there"}]
    )
    assert whole.choices[0].message.content == echo("hello there")
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage is not None and whole.usage.completion_tokens == len(
        echo("hello there").split(" ")
    )
    assert whole.id.startswith("chatcmpl-")

    stream = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == echo("stream me")
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(
        echo("stream me").split(" ")
    )
    assert {c.id for c in chunks} == {chunks[0].id}
    await client.close()


async def test_the_sync_sdk_and_its_raw_response(fake_pipeline):
    def ask() -> tuple[dict, str]:
        client = openai.OpenAI(
            base_url=base_url(fake_pipeline.edge),
            api_key=fake_pipeline.token("sync"),
            max_retries=0,
        )
        raw = client.chat.completions.with_raw_response.create(
            model="anything", messages=[{"role": "user", "content": "raw one"}], seed=5
        )
        completion = raw.parse()
        return dict(raw.headers), completion.choices[0].message.content or ""

    headers, text = await asyncio.to_thread(ask)
    assert text == echo("raw one")
    assert headers["content-type"].startswith("application/json")


async def test_a_stateless_client_carries_its_history_and_system_message(fake_pipeline):
    client = openai.AsyncOpenAI(
        base_url=base_url(fake_pipeline.edge), api_key=fake_pipeline.token("carrier"), max_retries=0
    )
    answer = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Italy?"},
        ],
    )
    # the fake engine counts the user messages of the prompt it was given
    assert answer.choices[0].message.content == echo("And of Italy?", turn=2)
    await client.close()


async def test_a_conversation_id_keeps_the_history_on_the_server(fake_pipeline):
    client = openai.AsyncOpenAI(
        base_url=base_url(fake_pipeline.edge), api_key=fake_pipeline.token("keeper"), max_retries=0
    )
    conversation = conv()
    headers = {"X-Turnstream-Conversation-Id": conversation}
    for turn, text in enumerate(["first", "second"], start=1):
        answer = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], extra_headers=headers
        )
        assert answer.choices[0].message.content == echo(text, turn=turn)
    other = openai.AsyncOpenAI(
        base_url=base_url(fake_pipeline.edge),
        api_key=fake_pipeline.token("intruder"),
        max_retries=0,
    )
    with pytest.raises(openai.PermissionDeniedError) as denied:
        await other.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "mine?"}], extra_headers=headers
        )
    assert denied.value.code == "forbidden_conversation"
    await client.close()
    await other.close()


async def test_stop_strings_end_the_answer_before_them(fake_pipeline):
    client = openai.AsyncOpenAI(
        base_url=base_url(fake_pipeline.edge), api_key=fake_pipeline.token("stopper"), max_retries=0
    )
    answer = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "cut here"}], stop=["here"]
    )
    assert answer.choices[0].message.content == "You said: cut "
    await client.close()


async def test_errors_come_in_openais_shape_with_the_protocols_codes(fake_pipeline):
    url = base_url(fake_pipeline.edge)
    stranger = openai.AsyncOpenAI(base_url=url, api_key="not-a-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as unauthenticated:
        await stranger.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert unauthenticated.value.status_code == 401
    assert unauthenticated.value.code == "token_invalid"

    client = openai.AsyncOpenAI(base_url=url, api_key=fake_pipeline.token("errs"), max_retries=0)
    with pytest.raises(openai.BadRequestError) as unsupported:
        await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            logit_bias={"1": 5},
        )
    assert unsupported.value.code == "unsupported_parameter"
    assert unsupported.value.param == "logit_bias"
    with pytest.raises(openai.BadRequestError) as too_long:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x" * 5000}]
        )
    assert too_long.value.code == "invalid_message"  # over TURNSTREAM_MAX_TURN_CHARS
    huge = "x" * (fake_pipeline.settings.max_frame_bytes + 1)
    with pytest.raises(openai.APIStatusError) as large:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": huge}]
        )
    assert large.value.status_code == 413 and large.value.code == "message_too_large"
    remote = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "http://a"}}}
    with pytest.raises(openai.BadRequestError) as bad_schema:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], response_format=remote
        )
    assert bad_schema.value.code == "invalid_response_format"
    with pytest.raises(openai.BadRequestError) as bad_tool:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], tool_choice="required"
        )
    assert bad_tool.value.code == "invalid_tools"  # a tool choice without tools
    # the server keeps answering
    answer = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "still here"}]
    )
    assert answer.choices[0].message.content == echo("still here")
    models = await client.models.list()
    assert {"auto", *fake_pipeline.settings.pool_names} <= {m.id for m in models.data}
    await stranger.close()
    await client.close()


async def test_a_stream_resumed_on_another_edge_by_last_event_id_misses_nothing(fake_pipeline):
    token = fake_pipeline.token("http-mover")
    headers = {"Authorization": f"Bearer {token}"}
    request = LONG_STREAM
    seen: list[str] = []
    ids: list[str] = []
    async with httpx.AsyncClient(timeout=30) as http:
        url = f"{base_url(fake_pipeline.edge)}/chat/completions"
        async with http.stream("POST", url, json=request, headers=headers) as response:
            assert response.status_code == 200
            resume_url = response.headers["X-Turnstream-Resume-Url"]
            async for event_id, data in sse_events(response):
                if event_id is not None and content_of(data):
                    seen.append(content_of(data))
                    ids.append(event_id)
                    if len(seen) == 5:
                        break
        # gone mid-answer; generation goes on; the client comes back on another edge node
        async with another_edge(fake_pipeline, "http-b") as other:
            resumed = f"http://127.0.0.1:{other.http_port}{resume_url}"
            last = {**headers, "Last-Event-ID": ids[-1]}
            async with http.stream("GET", resumed, headers=last) as response:
                assert response.status_code == 200
                finish = None
                async for event_id, data in sse_events(response):
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if content_of(data):
                        seen.append(content_of(data))
                        ids.append(event_id)
                    if chunk["choices"] and chunk["choices"][0]["finish_reason"]:
                        finish = chunk["choices"][0]["finish_reason"]
    assert "".join(seen) == echo(LONG_QUESTION)
    positions = [tuple(int(p) for p in i.split("-", 1)) for i in ids]
    assert positions == sorted(set(positions))  # in order, no duplicate
    assert finish == "stop"


async def test_a_resume_of_another_users_answer_is_refused_and_a_cancel_stops_it(fake_pipeline):
    token = fake_pipeline.token("http-canceller")
    headers = {"Authorization": f"Bearer {token}"}
    request = LONG_STREAM
    url = f"{base_url(fake_pipeline.edge)}/chat/completions"
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", url, json=request, headers=headers) as response,
    ):
        events = sse_events(response)
        _, opening = await anext(events)
        completion = json.loads(opening)["id"]
        stranger = {"Authorization": f"Bearer {fake_pipeline.token('http-stranger')}"}
        refused = await http.get(f"{url}/{completion}/events", headers=stranger)
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "unknown_turn"
        refused = await http.post(f"{url}/{completion}/cancel", headers=stranger)
        assert refused.status_code == 404
        cancelled = await http.post(f"{url}/{completion}/cancel", headers=headers)
        assert cancelled.status_code == 200
        last = None
        async for _, data in events:
            if data == "[DONE]":
                break
            last = json.loads(data)
    assert last is not None and last["turnstream"].get("cancelled") is True
    assert last["choices"][0]["finish_reason"] == "stop"


async def test_curl_streams_the_answer(fake_pipeline):
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "curl me"}], "stream": True}
    )
    process = await asyncio.create_subprocess_exec(
        "curl",
        "-sN",
        f"{base_url(fake_pipeline.edge)}/chat/completions",
        "-H",
        f"Authorization: Bearer {fake_pipeline.token('curl')}",
        "-H",
        "Content-Type: application/json",
        "-d",
        body,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    frames = [f for f in out.decode().split("\n\n") if f.strip()]
    assert frames[-1] == "data: [DONE]"
    text = "".join(
        content_of(line[6:])
        for frame in frames[:-1]
        for line in frame.split("\n")
        if line.startswith("data: ")
    )
    assert text == echo("curl me")


EVENT_SOURCE_READER = """
async ({question, token}) => {
  // POST the turn (fetch), keep only its resume URL, then follow the answer with the
  // browser's own EventSource, which reconnects by itself with Last-Event-ID each time
  // the edge ends the stream (TURNSTREAM_SSE_MAX_STREAM_S)
  const abort = new AbortController();
  const posted = await fetch("/v1/chat/completions", {
    method: "POST",
    signal: abort.signal,
    headers: {"Authorization": `Bearer ${token}`, "Content-Type": "application/json"},
    body: JSON.stringify({model: "m", messages: [{role: "user", content: question}],
                          max_tokens: 1000, stream: true}),
  });
  const resume = posted.headers.get("X-Turnstream-Resume-Url");
  abort.abort();
  return await new Promise((resolve, reject) => {
    const texts = [], ids = [];
    let opens = 0;
    const source = new EventSource(`${resume}?token=${encodeURIComponent(token)}`);
    source.onopen = () => { opens += 1; };
    source.onmessage = (event) => {
      if (event.data === "[DONE]") { source.close(); resolve({texts, ids, opens}); return; }
      for (const choice of JSON.parse(event.data).choices || []) {
        if (choice.delta && choice.delta.content) {
          texts.push(choice.delta.content);
          ids.push(event.lastEventId);
        }
      }
    };
    setTimeout(() => { source.close(); reject(new Error(`timed out: ${texts.length}`)); }, 60000);
  });
}
"""


async def test_a_browsers_event_source_follows_an_answer_across_reconnects(fake_pipeline):
    """Chromium's EventSource on the resume URL: the edge ends the stream every second, the
    browser reconnects with Last-Event-ID, and the text is whole, in order, once."""
    from playwright.async_api import async_playwright

    async with (
        another_edge(fake_pipeline, "http-browser", sse_max_stream_s=1.0) as edge,
        async_playwright() as playwright,
    ):
        browser = await playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True
        )
        page = await browser.new_page()
        await page.goto(f"http://127.0.0.1:{edge.http_port}/v1/models")  # same origin
        arg = {"question": LONG_QUESTION, "token": fake_pipeline.token("browser")}
        seen = await page.evaluate(EVENT_SOURCE_READER, arg)
        await browser.close()
    assert "".join(seen["texts"]) == echo(LONG_QUESTION)
    assert seen["opens"] >= 2  # it did reconnect
    positions = [tuple(int(p) for p in i.split("-", 1)) for i in seen["ids"]]
    assert positions == sorted(set(positions))


async def api_keys_cli(settings, *args: str) -> str:
    env = {**os.environ, **settings_env(settings)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "infra.api_keys", *args, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    assert process.returncode == 0
    return out.decode()


async def test_a_tenants_api_key_works_at_both_doors_until_it_is_revoked(fake_pipeline):
    settings = fake_pipeline.settings
    key = (await api_keys_cli(settings, "create", "acme", "keyholder", "--label", "ci")).split()[0]
    client = openai.AsyncOpenAI(base_url=base_url(fake_pipeline.edge), api_key=key, max_retries=0)
    answer = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "by key"}]
    )
    assert answer.choices[0].message.content == echo("by key")
    async with EdgeClient.connect(fake_pipeline.url, key) as ws:
        assert ws.ready is not None and ws.ready.user_id == "keyholder"
    listed = await api_keys_cli(settings, "list", "acme")
    assert key_id(key) in listed and key not in listed  # only the id is shown, never the key
    await api_keys_cli(settings, "revoke", key_id(key))
    with pytest.raises(openai.AuthenticationError) as revoked:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "again"}]
        )
    assert revoked.value.code == "key_revoked"
    forged = openai.AsyncOpenAI(
        base_url=base_url(fake_pipeline.edge), api_key=key[:-2] + "xx", max_retries=0
    )
    with pytest.raises(openai.AuthenticationError) as unknown:
        await forged.models.list()
    assert unknown.value.code == "token_invalid"
    await client.close()
    await forged.close()


@contextlib.asynccontextmanager
async def lone_edge(
    tmp_path: Path, tenants: dict[str, object], **changes: object
) -> AsyncIterator[EdgeServer]:
    """An edge of its own namespace, with its own tenant registry (no worker runs: streams
    open at the Kafka ack, and admission happens before anything reaches Kafka)."""
    registry = tmp_path / "tenants.json"
    registry.write_text(json.dumps({"tenants": tenants}))
    settings = Settings.from_env(
        namespace=f"http-alone-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        tenant_registry_path=str(registry),
        **changes,
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    edge = EdgeServer(settings)
    await edge.start()
    try:
        yield edge
    finally:
        await edge.stop()


async def test_the_sdk_retries_a_rate_limited_request_when_the_bucket_says(services, tmp_path):
    """A tenant with one request a second: the SDK's second request is refused with 429 and
    a retry hint, and the SDK, retrying by itself after that hint, gets its answer."""
    one_a_second = {"tier": "free", "limits": {"requests_per_minute": 60, "request_burst": 1}}
    refused = prom.EDGE_HTTP_REQUESTS.labels("completions", "429")
    async with lone_edge(tmp_path, {"retryco": one_a_second}) as edge:
        token = mint_token(edge.settings.auth_secret, "u", "retryco")
        patient = openai.AsyncOpenAI(base_url=base_url(edge), api_key=token, max_retries=3)
        impatient = openai.AsyncOpenAI(base_url=base_url(edge), api_key=token, max_retries=0)
        ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        first = await patient.chat.completions.create(**ask)
        with pytest.raises(openai.RateLimitError) as limited:
            await impatient.chat.completions.create(**ask)
        assert limited.value.code == "rate_limited"
        assert int(limited.value.response.headers["retry-after-ms"]) > 0
        assert limited.value.response.headers["x-should-retry"] == "true"
        before = refused._value.get()
        second = await patient.chat.completions.create(**ask)  # refused, waits, retried
        assert refused._value.get() >= before + 1
        await first.close()
        await second.close()
        await patient.close()
        await impatient.close()


async def test_the_sdk_retries_an_overloaded_door_and_is_served_once_the_load_falls(
    services, tmp_path
):
    """The pool is past the free tier's reject threshold: the door answers 503 `overloaded`
    with a retry hint; the SDK waits it out and retries by itself, and once the load falls
    its request is served (the same request, no code of the application's)."""
    unavailable = prom.EDGE_HTTP_REQUESTS.labels("completions", "503")
    async with lone_edge(tmp_path, {}, overload_retry_after_ms=700) as edge:
        await write_load(edge.settings, in_flight=7)  # 0.88: past free's reject_at 0.8
        token = mint_token(edge.settings.auth_secret, "u", "busyco")
        impatient = openai.AsyncOpenAI(base_url=base_url(edge), api_key=token, max_retries=0)
        ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with pytest.raises(openai.InternalServerError) as overloaded:
            await impatient.chat.completions.create(**ask)
        assert overloaded.value.status_code == 503 and overloaded.value.code == "overloaded"
        assert overloaded.value.response.headers["retry-after-ms"] == "700"
        assert overloaded.value.response.headers["x-should-retry"] == "true"

        before = unavailable._value.get()
        patient = openai.AsyncOpenAI(base_url=base_url(edge), api_key=token, max_retries=5)
        request = asyncio.create_task(patient.chat.completions.create(**ask))
        await eventually(lambda: unavailable._value.get() >= before + 1, timeout_s=30)
        await write_load(edge.settings, in_flight=0)  # the pool drains
        edge.admission.load.forget()  # read the board again now
        served = await asyncio.wait_for(request, 30)
        assert unavailable._value.get() >= before + 1  # it was refused, then retried
        await served.close()
        await patient.close()
        await impatient.close()


async def test_a_reader_that_stops_is_cut_off_and_dropped_while_the_answer_goes_on(
    fake_pipeline,
):
    """A client that posts a streamed request and stops reading: the edge joins the chunks
    that wait for it, cuts it off at the outbox's bound and drops its connection after
    TURNSTREAM_SLOW_CLOSE_S (the request's handler ends: nothing stays stuck behind it),
    another client of the same edge is served meanwhile, and the answer, which went on,
    is whole when resumed (on another edge)."""
    token = fake_pipeline.token("http-sloth")
    done_before = prom.EDGE_HTTP_REQUESTS.labels("completions", "200")._value.get()
    async with another_edge(
        fake_pipeline, "slow", outbox_max_bytes=600, slow_close_s=1.0, edge_send_buffer_bytes=8192
    ) as edge:
        body = json.dumps(LONG_STREAM).encode()
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        loop = asyncio.get_running_loop()
        sloth = tiny_socket(edge.http_port)
        await loop.sock_sendall(sloth, head + body)
        seen = b""
        async with asyncio.timeout(30):  # the headers and the first chunk, then no more reads
            while b'"resume_url"' not in seen:
                seen += await loop.sock_recv(sloth, 512)
        resume_url = next(
            line.split(": ", 1)[1]
            for line in seen.decode(errors="replace").split("\r\n")
            if line.lower().startswith("x-turnstream-resume-url:")
        )
        await eventually(lambda: edge.slow_clients_closed == 1, timeout_s=60)

        reader = openai.AsyncOpenAI(base_url=base_url(edge), api_key=token, max_retries=0)
        answer = await reader.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "short and sweet"}]
        )
        assert answer.choices[0].message.content == echo("short and sweet")
        await reader.close()
        # both handlers ended: the reader's, and the sloth's, dropped without reading it
        await eventually(
            lambda: (
                prom.EDGE_HTTP_REQUESTS.labels("completions", "200")._value.get() >= done_before + 2
            ),
            timeout_s=30,
        )
        rest = b""
        with contextlib.suppress(ConnectionResetError):
            async with asyncio.timeout(30):
                while chunk := await loop.sock_recv(sloth, 65536):
                    rest += chunk
        sloth.close()
        assert b"[DONE]" not in seen + rest  # cut, not finished

        headers = {"Authorization": f"Bearer {token}"}
        text: list[str] = []
        async with httpx.AsyncClient(timeout=30) as http:
            # on an edge whose outbox holds a whole answer's history at once
            url = f"http://127.0.0.1:{fake_pipeline.edge.http_port}{resume_url}"
            async with http.stream("GET", url, headers=headers) as response:
                async for _, data in sse_events(response):
                    if data == "[DONE]":
                        break
                    text.append(content_of(data))
    assert "".join(text) == echo(LONG_QUESTION)


async def test_openai_media_parts_go_through_the_same_preprocessing(fake_pipeline):
    """An `image_url` by `data:` URL and an `input_audio` clip, as OpenAI's SDK sends them:
    the image reaches the engine as the WebSocket's does, the audio is transcribed."""
    photo = base64.b64encode(encode_image(noise_image(64, 64, 1), "PNG")).decode()
    speech = decode_audio(
        espeak_wav("What is the capital of France?"), max_seconds=30, max_bytes=10_000_000
    )
    clip = base64.b64encode(wav16(np.concatenate([quiet_room(0.5), speech, quiet_room(0.8)])))
    client = openai.AsyncOpenAI(
        base_url=base_url(fake_pipeline.edge), api_key=fake_pipeline.token("media"), max_retries=0
    )
    seen = await client.chat.completions.create(
        model="m",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{photo}"}},
                ],
            }
        ],
    )
    assert (
        seen.choices[0].message.content == "You said: <image_1>\nWhat is this? (turn 1, 1 images)"
    )
    heard = await client.chat.completions.create(
        model="m",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": clip.decode(), "format": "wav"}}
                ],
            }
        ],
    )
    assert "capital of france" in (heard.choices[0].message.content or "").lower()
    with pytest.raises(openai.BadRequestError) as hostile:
        await client.chat.completions.create(
            model="m",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}},
                    ],
                }
            ],
        )
    assert hostile.value.code == "invalid_message"  # the edge's URL rules (https only)
    await client.close()

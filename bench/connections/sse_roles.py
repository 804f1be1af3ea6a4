"""The load's clients at the HTTP door (`--door sse`): each stream is one
`POST /v1/chat/completions` with `stream: true` held open, read as Server-Sent Events; a
resumed one is a `GET` of its resume URL with `Last-Event-ID`. The phases, the token stamps
and the checks are the WebSocket clients' (`roles.ClientsRole`), so the two doors' figures
compare: an SSE stream has no separate connect, so its "connection" is made by its turn."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

import msgspec

from bench.connections.roles import ClientsRole, _Stream, settle_heap


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    turnstream: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)


class SseClientsRole(ClientsRole):
    """One process's share of the load's SSE clients."""

    def __init__(self, config: dict[str, Any], conn: Any) -> None:
        super().__init__(config, conn)
        self.http_url = config["http_url"]
        self.session: Any = None
        self.resume_urls: dict[str, str] = {}  # turn id → its resume URL

    async def connect(self) -> dict[str, Any]:
        import aiohttp

        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )
        for stream in self.streams:
            stream.ws = True  # live: its turn opens its connection
        settle_heap()
        return {
            "connect_ms": [],
            "failures": 0,
            "failure_kinds": {},
            "failure_examples": [],
            "wall_s": 0.0,
        }

    async def _send_create(self, stream: _Stream, create_turn: Any, encode: Any) -> None:
        stream.create_attempts += 1
        if stream.create_attempts == 1:
            stream.create_sent = time.perf_counter()
        stream.reader = asyncio.create_task(self._post(stream))

    async def _post(self, stream: _Stream) -> None:
        body = {
            "model": "bench",
            "messages": [{"role": "user", "content": "stream me an answer"}],
            "stream": True,
        }
        headers = {
            "Authorization": f"Bearer {stream.token}",
            "Idempotency-Key": stream.client_turn_id,  # a retry is the same turn
        }
        try:
            response = await self.session.post(
                f"{self.http_url}/v1/chat/completions", json=body, headers=headers
            )
        except Exception as err:
            self._refuse(stream, f"send: {err!r}")
            return
        if response.status != 200:
            retry_ms = int(response.headers.get("retry-after-ms", "500"))
            retryable = response.headers.get("x-should-retry") == "true"
            payload = await response.json()
            response.release()
            if retryable and stream.create_attempts < 6:
                await asyncio.sleep(retry_ms / 1000)
                await self._send_create(stream, None, None)
                return
            self._refuse(stream, f"{payload['error']['code']}: refused")
            return
        resume = response.headers["X-Turnstream-Resume-Url"]
        stream.turn_id = resume.split("/chatcmpl-", 1)[1].split("/", 1)[0]
        self.resume_urls[stream.turn_id] = resume
        stream.accept_ms = (time.perf_counter() - stream.create_sent) * 1000
        if stream.accepted is not None and not stream.accepted.done():
            stream.accepted.set_result(stream.turn_id)
        stream.ws = response
        await self._read_events(stream, response)

    def _refuse(self, stream: _Stream, error: str) -> None:
        stream.error = error
        stream.ws = None
        if stream.accepted is not None and not stream.accepted.done():
            stream.accepted.set_result("")

    async def _read_events(self, stream: _Stream, response: Any, first: Any = None) -> None:
        """The stream's events until `[DONE]` (or until the connection drops)."""
        recorder = self.recorder
        event_id: str | None = None
        with contextlib.suppress(Exception):
            async for line in response.content:
                if line.startswith(b"id: "):
                    event_id = line[4:].strip().decode()
                    continue
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    # the SSE end carries no text: what arrived is checked by its indices
                    self._finished(stream, "".join(stream.parts))
                    stream.done_chars = stream.chars
                    return
                chunk = _chunk_decoder.decode(data)
                if event_id is not None:
                    epoch, _, offset = event_id.partition("-")
                    stream.position = (int(epoch), int(offset))
                    event_id = None
                for choice in chunk.choices:
                    text = choice.delta.content if choice.delta is not None else None
                    if text:
                        now = time.time() * 1000.0
                        recorder.delta(now, text, stream.check)
                        stream.chars += len(text)
                        if stream.tracked:
                            stream.parts.append(text)
                        if first is not None and not first.done():
                            first.set_result(None)
                if chunk.error is not None and not stream.error:
                    stream.error = f"{chunk.error.get('code')}: error event"

    async def _resume_one(self, stream: _Stream, gap_s: float) -> None:
        assert stream.first_resumed is not None
        try:
            stream.ws.close()  # the network drops mid-answer
            if stream.reader is not None:
                stream.reader.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await stream.reader
            stream.resumed = True
            await asyncio.sleep(gap_s)
            started = time.perf_counter()
            headers = {"Authorization": f"Bearer {stream.token}"}
            if stream.position is not None:
                headers["Last-Event-ID"] = "-".join(map(str, stream.position))
            url = f"{self.http_url}{self.resume_urls[stream.turn_id]}"
            response = await self.session.get(url, headers=headers)
            opened = (time.perf_counter() - started) * 1000
            if response.status != 200:
                raise RuntimeError(f"resume refused: {response.status}")
            stream.resume_steps = (opened, opened, opened)  # one request: no session steps
            stream.resume_status = "resumed"
            stream.ws = response
            first = asyncio.get_running_loop().create_future()
            reading = asyncio.create_task(self._read_events(stream, response, first))
            self.background.add(reading)
            await asyncio.wait([first, reading], return_when=asyncio.FIRST_COMPLETED)
            stream.resume_ms = (time.perf_counter() - started) * 1000
        except Exception as err:
            stream.error = f"resume: {err!r}"
        finally:
            if not stream.first_resumed.done():
                stream.first_resumed.set_result(None)

    async def exit(self) -> dict[str, Any]:
        for task in self.background:
            task.cancel()
        for stream in self.streams:
            if stream.reader is not None:
                stream.reader.cancel()
            if hasattr(stream.ws, "close"):
                stream.ws.close()
        if self.session is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.session.close(), 10)
        return {"errors": dict(Counter(s.error.split(":")[0] for s in self.streams if s.error))}

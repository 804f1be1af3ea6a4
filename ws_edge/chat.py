"""`python -m ws_edge.chat`: talk to the assistant from a terminal.

Answers stream as they are generated. Ctrl-C while an answer streams cancels that turn
(generation stops in the engine); Ctrl-C or Ctrl-D at the prompt leaves. `/new` starts a new
conversation, `/quit` leaves. `/image PATH-or-https-URL [question]` asks about a picture,
`/audio PATH [text]` sends a recording (WAV, WebM/Opus, MP3...) as the question.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import uuid
from pathlib import Path

from schemas.settings import Settings
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, TurnRejected, audio_part, image_part
from ws_edge.messages import (
    ErrorEvent,
    InputTranscript,
    Part,
    ResponseDelta,
    ResponseDone,
    ResponseRetracted,
)

DIM, RESET = "\033[2m", "\033[0m"


async def read_line(prompt: str) -> str | None:
    """Read one line from stdin without blocking the loop (None at end of input)."""
    print(prompt, end="", flush=True)
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[str] = loop.create_future()

    def on_readable() -> None:
        if not ready.done():
            ready.set_result(sys.stdin.readline())

    loop.add_reader(sys.stdin.fileno(), on_readable)
    try:
        line = await ready
    finally:
        loop.remove_reader(sys.stdin.fileno())
    return line.rstrip("\n") if line else None


def media_command(line: str) -> tuple[str, list[Part]] | None:
    """`/image SOURCE [text]` or `/audio PATH [text]` → (text, parts); None for plain text.
    Raises ValueError with a message for the user when the source cannot be used."""
    command, _, rest = line.strip().partition(" ")
    if command not in {"/image", "/audio"}:
        return None
    source, _, text = rest.strip().partition(" ")
    if not source:
        raise ValueError(f"usage: {command} PATH{' or https URL' * (command == '/image')} [text]")
    if command == "/image" and source.startswith("https://"):
        return text, [image_part(url=source)]
    path = Path(source).expanduser()
    if not path.is_file():
        raise ValueError(f"no file {path}")
    data = path.read_bytes()
    return text, [image_part(data) if command == "/image" else audio_part(data)]


async def answer(client: EdgeClient, conversation: str, text: str, parts=()) -> None:
    turn_id = await client.start_turn(conversation, text, parts=list(parts))
    loop = asyncio.get_running_loop()
    cancels: list[asyncio.Task[None]] = []

    def on_interrupt() -> None:
        if not cancels:
            cancels.append(loop.create_task(client.cancel(turn_id)))

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    try:
        async for event in client.events(turn_id):
            if isinstance(event, InputTranscript):
                print(f"{DIM}(heard: {event.text}){RESET}\nassistant> ", end="", flush=True)
            elif isinstance(event, ResponseDelta):
                print(event.text, end="", flush=True)
            elif isinstance(event, ResponseRetracted):
                # a terminal cannot unprint: strike what was shown, then the replacement
                print(f"{DIM}\n[retracted {event.shown_chars} characters: {event.reason}]{RESET}")
                print(event.text, end="", flush=True)
            elif isinstance(event, ErrorEvent):
                print(f"\n[error {event.code}: {event.message}]", flush=True)
            elif isinstance(event, ResponseDone):
                t = event.timings
                ttft = f"{t.ttft_ms:.0f} ms" if t.ttft_ms is not None else "-"
                note = f" [{event.finish_reason}]" if event.finish_reason != "stop" else ""
                if event.error is not None:
                    note += f" [{event.error.code}: {event.error.message}]"
                print(
                    f"{note}\n{DIM}({event.usage.completion_tokens} tokens, first after {ttft}, "
                    f"{t.e2e_ms / 1000:.1f} s, {event.model}){RESET}",
                    flush=True,
                )
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def chat(url: str, token: str) -> None:
    async with EdgeClient.connect(url, token) as client:
        assert client.ready is not None
        print(
            f"connected to {url} as {client.ready.user_id} "
            "(Ctrl-C stops an answer, /new starts over, /image or /audio sends media, "
            "/quit or Ctrl-D leaves)"
        )
        conversation = f"chat-{uuid.uuid4().hex[:12]}"
        while True:
            line = await read_line("\nyou> ")
            if line is None or line.strip() == "/quit":
                return
            if line.strip() == "/new":
                conversation = f"chat-{uuid.uuid4().hex[:12]}"
                print("(new conversation)")
                continue
            if not line.strip():
                continue
            try:
                media = media_command(line)
            except (ValueError, OSError) as err:
                print(f"[{err}]")
                continue
            text, parts = media if media is not None else (line, [])
            print("assistant> ", end="", flush=True)
            try:
                await answer(client, conversation, text, parts)
            except TurnRejected as err:
                retry = " (retry)" if err.error.retryable else ""
                print(f"[{err.error.code}: {err.error.message}{retry}]")


def main() -> None:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=f"ws://127.0.0.1:{settings.edge_port}/")
    parser.add_argument("--user", default="you")
    parser.add_argument("--token", help="a signed token (default: minted with the dev secret)")
    args = parser.parse_args()
    token = args.token or mint_token(settings.auth_secret, args.user, "local")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(chat(args.url, token))
    print()
    sys.exit(0)


if __name__ == "__main__":
    main()

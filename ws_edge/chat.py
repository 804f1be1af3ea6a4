"""`python -m ws_edge.chat`: talk to the assistant from a terminal.

Answers stream as they are generated. Ctrl-C while an answer streams cancels that turn
(generation stops in the engine); Ctrl-C or Ctrl-D at the prompt leaves. `/new` starts a new
conversation, `/quit` leaves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import uuid

from schemas.settings import Settings
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.messages import ErrorEvent, ResponseDelta, ResponseDone

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


async def answer(client: EdgeClient, conversation: str, text: str) -> None:
    turn_id = await client.start_turn(conversation, text)
    loop = asyncio.get_running_loop()
    cancels: list[asyncio.Task[None]] = []

    def on_interrupt() -> None:
        if not cancels:
            cancels.append(loop.create_task(client.cancel(turn_id)))

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    try:
        async for event in client.events(turn_id):
            if isinstance(event, ResponseDelta):
                print(event.text, end="", flush=True)
            elif isinstance(event, ErrorEvent):
                print(f"\n[error {event.code}: {event.message}]", flush=True)
            elif isinstance(event, ResponseDone):
                t = event.timings
                ttft = f"{t.ttft_ms:.0f} ms" if t.ttft_ms is not None else "-"
                note = f" [{event.finish_reason}]" if event.finish_reason != "stop" else ""
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
            "(Ctrl-C stops an answer, /new starts over, /quit or Ctrl-D leaves)"
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
            print("assistant> ", end="", flush=True)
            try:
                await answer(client, conversation, line)
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

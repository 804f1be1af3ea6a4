"""`python -m infra.chat`: talk to the assistant from a terminal.

Answers stream as they are generated. Ctrl-C while an answer streams cancels that turn
(generation stops in the engine); Ctrl-C or Ctrl-D at the prompt leaves. `/new` starts a new
conversation, `/quit` leaves. `/image PATH-or-https-URL [question]` asks about a picture,
`/audio PATH [text]` sends a recording (WAV, WebM/Opus, MP3...) as the question.
`/speak [VOICE]` has answers spoken too (a terminal cannot play them: each answer's audio is
saved as a WAV file in `--speech-dir`), `/speak off` stops; Ctrl-C then interrupts the
answer (barge-in: the history keeps what was spoken so far). `/tools SERVER` offers the
tools of one of the deployment's MCP servers (the local stack runs `calc`, a calculator)
and has each question answered by a call of one of them, run by the tools worker, whose
result the answer then goes on from; `/tools off` stops.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import signal
import sys
import uuid
import wave
from base64 import b64decode
from pathlib import Path

from runtime.settings import Settings
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, TurnRejected, audio_part, image_part
from ws_edge.messages import (
    ErrorEvent,
    InputTranscript,
    McpTool,
    Part,
    ResponseAudio,
    ResponseAudioDone,
    ResponseDelta,
    ResponseDone,
    ResponseRetracted,
    ResponseTruncated,
    SpeechOptions,
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


def speak_command(line: str) -> str | None:
    """`/speak [VOICE]` → the voice ("joe" by default), `/speak off` → "" ; None otherwise."""
    words = line.split()
    if not words or words[0] != "/speak":
        return None
    if len(words) > 2:
        raise ValueError("usage: /speak [VOICE] or /speak off")
    voice = words[1] if len(words) == 2 else "joe"
    return "" if voice == "off" else voice


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    """A PCM s16 mono WAV file of the answer's audio."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm)
    return out.getvalue()


def save_speech(folder: Path, turn_id: str, pcm: bytes, sample_rate: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{turn_id}.wav"
    path.write_bytes(wav_bytes(pcm, sample_rate))
    return path


async def answer(
    client: EdgeClient,
    conversation: str,
    text: str,
    parts=(),
    *,
    speech_dir: Path | None = None,
) -> None:
    """`speech_dir`: speech is on; the answer's audio is saved there."""
    turn_id = await client.start_turn(conversation, text, parts=list(parts))
    loop = asyncio.get_running_loop()
    cancels: list[asyncio.Task[None]] = []
    following = [turn_id]  # the answer, then each turn it continues in (the tools ran)

    def on_interrupt() -> None:
        if not cancels:
            now = following[-1]
            stop = client.interrupt(now) if speech_dir else client.cancel(now)
            cancels.append(loop.create_task(stop))

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    try:
        while following:
            done = await _stream(client, following[-1], speech_dir)
            if done is None or not done.continued_by:
                return
            for call in done.tool_calls:
                print(f"{DIM}(called {call.name} {call.arguments}){RESET}")
            print("assistant> ", end="", flush=True)
            following.append(done.continued_by)
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _stream(client: EdgeClient, turn_id: str, speech_dir: Path | None) -> ResponseDone | None:
    """Print one turn's events; its `response.done`."""
    audio: list[bytes] = []
    rate = 22050
    ended: ResponseDone | None = None
    async for event in client.events(turn_id, speech=speech_dir is not None):
        if isinstance(event, ResponseAudio):
            audio.append(b64decode(event.audio))
            rate = event.sample_rate
        elif isinstance(event, ResponseTruncated):
            print(f"{DIM}\n[interrupted: the history keeps {event.text!r}]{RESET}")
        elif isinstance(event, ResponseAudioDone) and speech_dir is not None:
            pcm = b"".join(audio)
            path = await asyncio.to_thread(save_speech, speech_dir, turn_id, pcm, rate)
            seconds = len(pcm) / 2 / rate
            print(f"{DIM}(spoke {seconds:.1f} s, {event.reason}: {path}){RESET}", flush=True)
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
            ended = event
    return ended


def tools_command(line: str) -> list[McpTool] | None:
    """`/tools SERVER` → that server's tools, `/tools off` → none; None otherwise."""
    words = line.split()
    if not words or words[0] != "/tools":
        return None
    if len(words) != 2:
        raise ValueError("usage: /tools SERVER (the local stack's: calc) or /tools off")
    return [] if words[1] == "off" else [McpTool(server_label=words[1])]


async def chat(url: str, token: str, speech_dir: Path) -> None:
    async with EdgeClient.connect(url, token) as client:
        assert client.ready is not None
        print(
            f"connected to {url} as {client.ready.user_id} "
            "(Ctrl-C stops an answer, /new starts over, /image or /audio sends media, "
            "/speak speaks, /tools calc calls the calculator, /quit or Ctrl-D leaves)"
        )
        conversation = f"chat-{uuid.uuid4().hex[:12]}"
        speaking = False
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
                tools = tools_command(line)
                if tools is not None:
                    choice = "required" if tools else None  # the small model calls when held to
                    await client.update_session(tools=tools, tool_choice=choice)
                    print(f"(tools: {tools[0].server_label if tools else 'off'})")
                    continue
                voice = speak_command(line)
                if voice is not None:
                    options = SpeechOptions(voice) if voice else None
                    updated = await client.update_session(speech=options)
                    speaking = updated.speech is not None
                    state = f"on ({voice}; audio saved in {speech_dir})" if speaking else "off"
                    print(f"(speech {state}; voices: {', '.join(updated.voices)})")
                    continue
                media = media_command(line)
            except (ValueError, OSError) as err:
                print(f"[{err}]")
                continue
            except TurnRejected as err:
                print(f"[{err.error.code}: {err.error.message}]")
                continue
            text, parts = media if media is not None else (line, [])
            print("assistant> ", end="", flush=True)
            try:
                await answer(
                    client, conversation, text, parts, speech_dir=speech_dir if speaking else None
                )
            except TurnRejected as err:
                retry = " (retry)" if err.error.retryable else ""
                print(f"[{err.error.code}: {err.error.message}{retry}]")


def main() -> None:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=f"ws://127.0.0.1:{settings.edge_port}/")
    parser.add_argument("--user", default="you")
    parser.add_argument("--token", help="a signed token (default: minted with the dev secret)")
    parser.add_argument(
        "--speech-dir",
        type=Path,
        default=settings.state_path / "speech",
        help="where /speak saves each answer's audio (WAV)",
    )
    args = parser.parse_args()
    token = args.token or mint_token(settings.auth_secret, args.user, "local")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(chat(args.url, token, args.speech_dir))
    print()
    sys.exit(0)


if __name__ == "__main__":
    main()

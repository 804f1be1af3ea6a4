"""Voice-to-voice latency on CPU, hop by hop, and how fast a barge-in stops an answer.

The whole pipeline runs in-process (edge with the voice loop → Kafka → preprocess: VAD and
Whisper → assembly → inference with the fake engine at a fixed token rate → TTS worker →
edge). A client streams a spoken question (espeak-ng) in real time, 20 ms per message, then
silence, as a microphone would. From the moment the user's speech ends (the last frame Silero
scores as speech, found offline on the same clip: espeak-ng's clip carries ~230 ms of
silence after the last word, which is not counted as speech) it times, at the client:
`input.speech_stopped` (end-pointing: the VAD's silence rule), `input.transcript` (ASR and
its Kafka hops), `response.started` (prompt assembly, routing), the first
`response.delta` (first token), the first `response.audio` (first piece of ~10-20
characters plus its synthesis). Each voice (piper "joe", espeak-ng) is one run; the
baseline in the same run is the first *text* of the same answer (first audio / first text
is what speaking costs).

Barge-in: while an answer streams and speaks, the client sends `turn.interrupt`; it times
`response.audio.done` (no more audio will come: the edge dropped what was queued) and
`response.done` (generation stopped: the engine aborted), and counts audio frames that were
already on the wire when the interrupt left the client (the client drops them) and frames
after `response.audio.done` (must be 0).

    python -m bench.voice                 # 10 questions and 10 barge-ins per voice and
                                          # setup, before and after (~10 min)
    python -m bench.voice --turns 20 --configs after --voices espeak

Setups (`--configs`), in the same run: *before* is the silence rule (`server_vad`) and
Whisper's fixed 30 s window, as until 2026-12-06; *window* changes only the window (sized to
the speech); *after* adds the audio turn model (`semantic_vad`, eagerness auto).

Prints a table; writes bench/results/voice.{json,png} and bench/figures/voice.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid

import numpy as np
import uvloop

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from harness.media import pcm16, quiet_room, spoken
from harness.stack import pipeline
from runtime.settings import Settings
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient
from ws_edge.messages import (
    InputSpeechStopped,
    InputTranscript,
    InputTranscriptInterim,
    ResponseAudio,
    ResponseAudioDone,
    ResponseDelta,
    ResponseDone,
    ResponseStarted,
    SpeechOptions,
    TurnAccepted,
    TurnDetection,
)
from ws_edge.voice.loop import SpeechEnded, VadRules, VoiceLoop
from ws_edge.voice.speech_detector import SpeechDetector

VOICES = ("joe", "espeak")
# What each run sets up: how turns end, and whether Whisper reads a window sized to the speech.
# "before" is the stack as it was until 2026-12-06 (the baseline, in the same run).
# "after+lm" adds the preprocessing worker's English text model (TURNSTREAM_SENTENCE_END_MODEL).
CONFIGS: dict[str, dict] = {
    "before": {"turn_detection": "server_vad", "asr_short_window": False},
    "window": {"turn_detection": "server_vad", "asr_short_window": True},  # one change alone
    "after": {"turn_detection": "semantic_vad", "asr_short_window": True},
    # after, with interim transcripts (the edge reads the words so far every second of speech)
    "after+interim": {
        "turn_detection": "semantic_vad",
        "asr_short_window": True,
        "interim_transcripts": True,
    },
    "after+lm": {
        "turn_detection": "semantic_vad",
        "asr_short_window": True,
        "sentence_end_model": True,
    },
}
QUESTION = "What is the capital of France?"
# A long answer to barge in on (the fake engine echoes the question). Not "Tell me about
# city number N" (until 2026-12-06): the input screen refuses that as a search for someone's
# personal information (a false positive), and a refused turn has nothing to interrupt.
LONG = " ".join(
    f"Part {i} of a long story about a lighthouse keeper and the sea." for i in range(12)
)
CHUNK_MS = 20
HOPS = ("endpointing", "asr", "prompt", "first_token", "first_audio")


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


async def stream_realtime(client: EdgeClient, stream_id: str, pcm: bytes) -> float:
    """Send `pcm` as a microphone would (one 20 ms message every 20 ms); returns the wall
    time (perf_counter) when the first byte was sent."""
    step = 16 * CHUNK_MS * 2  # bytes of 16 kHz PCM16 per message
    start = time.perf_counter()
    for i, offset in enumerate(range(0, len(pcm), step)):
        await client.append_audio(stream_id, pcm[offset : offset + step], chunk_bytes=step)
        delay = start + (i + 1) * CHUNK_MS / 1000 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    return start


def end_of_speech_ms(speech: np.ndarray) -> float:
    """Where the VAD hears the speech of `speech` end (ms into it), with the edge's rules."""
    loop = VoiceLoop(VadRules())
    frames = loop.append(pcm16(np.concatenate([speech, quiet_room(1.0)])))
    events = loop.scored(frames, SpeechDetector().score(frames), assistant_speaking=False)
    return next(e.end_ms for e in events if isinstance(e, SpeechEnded))


async def voice_turn(client: EdgeClient, speech: np.ndarray, voice_end_ms: float) -> dict:
    """One spoken question; milliseconds from the end of speech to each event."""
    silence = quiet_room(1.0)
    speech_pcm, tail = pcm16(speech), pcm16(silence)
    await stream_realtime(client, "mic", pcm16(quiet_room(0.3)))
    cpu_start = time.process_time()  # every role runs in this process: the turn's CPU
    speech_start: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    async def talk() -> None:  # the question, then silence, as a microphone goes on
        speech_start.set_result(await stream_realtime(client, "mic", speech_pcm))
        await stream_realtime(client, "mic", tail)

    sending = asyncio.ensure_future(talk())
    marks: dict[str, float] = {"interims": 0.0}
    heard: dict[str, str] = {}
    while True:  # speech_started, interim transcripts, then turn.accepted
        accepted = await client.next_event()
        if isinstance(accepted, InputTranscriptInterim):
            marks["interims"] += 1
        if isinstance(accepted, TurnAccepted):
            break
    speech_end = await speech_start + voice_end_ms / 1000
    async for event in client.events(accepted.turn_id, speech=True):
        now = (time.perf_counter() - speech_end) * 1000
        kind = {
            InputSpeechStopped: "endpointing",
            InputTranscript: "asr",
            ResponseStarted: "prompt",
            ResponseDelta: "first_token",
            ResponseAudio: "first_audio",
        }.get(type(event))
        if kind is not None:
            marks.setdefault(kind, now)
        if isinstance(event, InputTranscript):
            heard["transcript"] = event.text
        if isinstance(event, ResponseDone):
            heard["finish"] = str(event.finish_reason)
    await sending
    marks["cpu_ms"] = (time.process_time() - cpu_start) * 1000
    if not all(hop in marks for hop in HOPS):  # refused, cut or split: say what it was
        progress(f"incomplete turn {heard}: {sorted(marks)}")
    return marks


async def barge_in(client: EdgeClient, voice: str) -> dict[str, float]:
    turn_id = await client.start_turn(
        f"c-{uuid.uuid4().hex[:8]}", LONG, speech=SpeechOptions(voice)
    )
    sent = None
    stopped = False
    out = {"in_flight": 0.0, "audio_after_done": 0.0}
    async for event in client.events(turn_id, speech=True):
        now = time.perf_counter()
        if isinstance(event, ResponseAudio):
            if sent is None:
                sent = now
                await client.interrupt(turn_id)
            elif stopped:  # the edge said no more audio, then sent some: a bug
                out["audio_after_done"] += 1
            else:  # already on the wire when the interrupt left the client
                out["in_flight"] += 1
        if sent is not None and isinstance(event, ResponseAudioDone):
            stopped = True
            out["audio_stopped_ms"] = (now - sent) * 1000
        if sent is not None and isinstance(event, ResponseDone):
            out["generation_stopped_ms"] = (now - sent) * 1000
            out["cancelled"] = float(event.finish_reason == "cancelled")
    return out


async def run_voice(voice: str, config: str, args: argparse.Namespace, speech: np.ndarray) -> dict:
    setup = CONFIGS[config]
    settings = Settings.from_env(
        namespace=f"bench-voice-{voice}-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        safety_output_policy="off",
        vad_silence_ms=args.silence_ms,
        asr_short_window=setup["asr_short_window"],
        sentence_end_model=setup.get("sentence_end_model", False),
    )
    voice_end_ms = end_of_speech_ms(speech)
    engine = FakeEngine(token_interval_s=args.token_ms / 1000)
    turns, barges = [], []
    async with (
        pipeline(settings, engine, with_tts=True) as running,
        EdgeClient.connect(running.url, running.token()) as client,
    ):
        judge = running.preprocess.service.sentence_end if running.preprocess else None
        if judge is not None:  # as after a first guess (it loads on one)
            await asyncio.to_thread(judge.load)
        conversation = f"c-{uuid.uuid4().hex[:8]}"
        await client.update_session(
            speech=SpeechOptions(voice),
            turn_detection=TurnDetection(
                conversation_id=conversation,
                stream_id="mic",
                type=setup["turn_detection"],
                interim_transcripts=setup.get("interim_transcripts", False),
            ),
        )
        await voice_turn(client, speech, voice_end_ms)  # warm up: models loaded, topics assigned
        for i in range(args.turns):
            progress(f"{voice} ({config}): spoken question {i + 1}/{args.turns}")
            turns.append(await voice_turn(client, speech, voice_end_ms))
        await client.update_session(turn_detection=None)
        for i in range(args.turns):
            progress(f"{voice} ({config}): barge-in {i + 1}/{args.turns}")
            barges.append(await barge_in(client, voice))
    return {"turns": turns, "barge_ins": barges}


def summary(results: dict[str, dict]) -> list[dict]:
    rows = []
    for voice, run in results.items():
        complete = [t for t in run["turns"] if all(hop in t for hop in HOPS)]
        row: dict = {"voice": voice, "incomplete_turns": len(run["turns"]) - len(complete)}
        r = {**run, "turns": complete}
        previous = [0.0] * len(r["turns"])
        for hop in HOPS:
            at = [t[hop] for t in r["turns"]]
            row[f"{hop}_p50_ms"] = percentile(at, 50)
            row[f"{hop}_p99_ms"] = percentile(at, 99)
            gaps = [a - p for a, p in zip(at, previous, strict=True)]
            row[f"{hop}_hop_p50_ms"] = percentile(gaps, 50)
            previous = at
        row["audio_vs_text"] = row["first_audio_p50_ms"] / row["first_token_p50_ms"]
        cpu = [t["cpu_ms"] for t in r["turns"]]
        row["cpu_p50_ms"], row["cpu_p99_ms"] = percentile(cpu, 50), percentile(cpu, 99)
        row["cpu_min_ms"], row["cpu_max_ms"] = min(cpu), max(cpu)
        row["interims_per_turn"] = float(np.mean([t["interims"] for t in r["turns"]]))
        b = [x for x in r["barge_ins"] if "audio_stopped_ms" in x]
        row["barge_ins_without_audio"] = len(r["barge_ins"]) - len(b)  # nothing to interrupt
        row["barge_audio_p50_ms"] = percentile([x["audio_stopped_ms"] for x in b], 50)
        row["barge_audio_p99_ms"] = percentile([x["audio_stopped_ms"] for x in b], 99)
        stopped = [x["generation_stopped_ms"] for x in b if "generation_stopped_ms" in x]
        row["barge_generation_p50_ms"] = percentile(stopped, 50)
        row["barge_generation_p99_ms"] = percentile(stopped, 99)
        row["audio_frames_in_flight"] = sum(x["in_flight"] for x in b)
        row["audio_frames_after_done"] = sum(x["audio_after_done"] for x in b)
        rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    print("voice-to-voice, ms after the end of the user's speech (p50 / p99), hop p50 in ()")
    print(f"{'voice':>14} " + " ".join(f"{h:>22}" for h in HOPS) + f" {'audio/text':>10}")
    for r in rows:
        cells = " ".join(
            f"{r[f'{h}_p50_ms']:>6.0f}/{r[f'{h}_p99_ms']:>6.0f} ({r[f'{h}_hop_p50_ms']:>5.0f})"
            for h in HOPS
        )
        print(f"{r['voice']:>14} {cells} {r['audio_vs_text']:>10.2f}")
    print(
        "CPU per spoken turn, every role in this process (ms: p50 [min-max]), interims per "
        "turn, turns left out (no answer)"
    )
    for r in rows:
        print(
            f"{r['voice']:>14} {r['cpu_p50_ms']:>7.0f} "
            f"[{r['cpu_min_ms']:.0f}-{r['cpu_max_ms']:.0f}] {r['interims_per_turn']:>6.1f} "
            f"{r['incomplete_turns']:>3}"
        )
    print("barge-in, ms after turn.interrupt (p50 / p99)")
    print(
        f"{'voice':>14} {'audio stopped':>16} {'generation stopped':>20} "
        f"{'frames in flight':>17} {'after audio.done':>17}"
    )
    for r in rows:
        print(
            f"{r['voice']:>14} {r['barge_audio_p50_ms']:>7.1f}/{r['barge_audio_p99_ms']:>7.1f} "
            f"{r['barge_generation_p50_ms']:>9.1f}/{r['barge_generation_p99_ms']:>9.1f} "
            f"{r['audio_frames_in_flight']:>17.0f} {r['audio_frames_after_done']:>17.0f}"
        )


def plot(rows: list[dict], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    bottom = np.zeros(len(rows))
    names = [r["voice"].replace(" ", "\n", 1) for r in rows]  # "joe\nafter": no overlap
    for hop in HOPS:
        values = np.array([r[f"{hop}_hop_p50_ms"] for r in rows])
        left.bar(names, values, bottom=bottom, label=hop)
        bottom += values
    left.axhline(650, color="red", linestyle="--", label="650 ms target (espeak)")
    left.axhline(800, color="darkred", linestyle=":", label="800 ms target (piper)")
    left.set_ylabel("ms after the end of speech (p50, stacked hops)")
    left.set_title(
        f"voice to first audio ({args.token_ms:g} ms/token, {args.silence_ms:g} ms end-pointing)"
    )
    left.legend(fontsize=8)
    x = np.arange(len(rows))
    right.bar(x - 0.2, [r["barge_audio_p50_ms"] for r in rows], 0.4, label="audio stopped")
    right.bar(
        x + 0.2, [r["barge_generation_p50_ms"] for r in rows], 0.4, label="generation stopped"
    )
    right.axhline(100, color="red", linestyle="--", label="100 ms target")
    right.set_xticks(x, names)
    right.set_ylabel("ms after turn.interrupt (p50)")
    right.set_title("barge-in")
    right.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, "voice")


async def main_async(args: argparse.Namespace) -> None:
    speech = spoken(args.question)
    results = {}
    for voice in args.voices:
        for config in args.configs:
            results[f"{voice} {config}"] = await run_voice(voice, config, args, speech)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "voice.json").write_text(json.dumps({"args": vars(args), "raw": results}))
    rows = summary(results)
    print_table(rows)
    payload = {"args": vars(args), "rows": rows, "raw": results}
    (RESULTS / "voice.json").write_text(json.dumps(payload, indent=2))
    plot(rows, args)
    print(f"wrote {RESULTS / 'voice.json'} and bench/figures/voice.png")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.voice")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--token-ms", type=float, default=20.0)
    parser.add_argument("--voices", nargs="+", default=list(VOICES))
    parser.add_argument(
        "--configs",
        nargs="+",
        default=list(CONFIGS),
        choices=list(CONFIGS),
        help="before: server_vad + Whisper's 30 s window; window: server_vad + a window sized "
        "to the speech; after: semantic_vad + that window; after+lm: and the English text "
        "model's verdict on each guess; after+interim: after, with interim transcripts",
    )
    parser.add_argument("--question", default=QUESTION, help="what the user says (espeak-ng)")
    parser.add_argument(
        "--silence-ms", type=float, default=500.0, help="the VAD's end-of-speech silence"
    )
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()

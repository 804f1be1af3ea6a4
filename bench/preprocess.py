"""What preprocessing costs: throughput of the models in-process, and the latency the
preprocessing hop adds to a turn, measured at the WebSocket client.

(a) In-process, no Kafka: spoken questions (espeak-ng, 2-6 s with quiet room around them,
    WebM/Opus) through `SpeechPipeline.recognize` (decode → Silero VAD → Whisper), one at a
    time and from 2 threads (one shared pipeline, as the worker runs it; and two pipelines
    with one ASR thread each); the baseline is real time (RTF = processing / audio seconds).
    Photo-like JPEGs (1024x768 and 4000x3000) through `preprocess_image`, and through
    `VisionPipeline.prepare` on Redis when the tensor is not stored yet (miss) vs stored (hit).
(b) Text turns through the whole stack on the fake engine (edge → Kafka → preprocess →
    assembly → inference → Redis → edge); baseline: the same engine in-process. Kafka record
    timestamps (producer wall clock, one host) of turns.submitted / enriched / assembled split
    the client's TTFT into hops, so the preprocessing hop's own p50/p99 is visible.
(c) End of speech → first token for a spoken question: the clip sent as one turn (the clock
    starts when the turn is sent: the speech has ended) or streamed with `audio.append`
    beforehand (the clock starts after the last piece); baseline: the same question typed.

    python -m bench.preprocess                    # all three, ~3 min on 2 cores
    python -m bench.preprocess --parts a --clips 24

Prints p50/p99 tables and ratios, writes bench/results/preprocess.{json,png} and copies the
figure to bench/figures/preprocess.png.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import queue
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import uvloop
from PIL import Image

from bench.pipeline_latency import run_direct, start_pipeline
from bench.stats import compare, percentile, summary
from harness.kafka import records_so_far
from harness.media import encode_image, encode_opus, espeak_wav, pcm16, quiet_room, words
from infra.stack import REPO
from runtime.blobs import RedisBlobStore, sha256_hex
from runtime.kafka_topics import ensure_topics
from runtime.processes import free_port, stop_roles
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.codec import decode
from schemas.events import DecodingParams, FinishReason, MediaKind, MediaRef
from schemas.topics import TURNS_ASSEMBLED, TURNS_ENRICHED, TURNS_SUBMITTED
from workers.inference.engines.fake_engine import FakeEngine
from workers.preprocess.audio_decode import decode_audio
from workers.preprocess.images import ImageLimits, preprocess_image
from workers.preprocess.speech import SpeechPipeline
from workers.preprocess.vision import VisionPipeline
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, audio_part
from ws_edge.messages import InputTranscript, ResponseDelta, ResponseDone

RESULTS = REPO / "bench" / "results"
FIGURES = REPO / "bench" / "figures"
RATE = 16_000

QUESTIONS = (
    "What is the capital of France?",
    "How far away is the moon from the earth?",
    "Can you recommend a good book about the history of science?",
    "What time does the train to Boston leave tomorrow morning?",
    "Please explain how a refrigerator keeps food cold.",
    "Why is the sky blue during the day and red at sunset?",
    "What should I cook for dinner tonight with rice and beans?",
    "How many people live in Tokyo?",
    "Tell me a joke about computers.",
    "What is the difference between weather and climate?",
    "How do I convert twenty degrees Celsius to Fahrenheit?",
    "Which planet in the solar system has the most moons?",
)


def progress(message: str, *, end: str = "\n") -> None:
    print(message, file=sys.stderr, end=end, flush=True)


def cell(values: Sequence[float], digits: int = 1) -> str:
    return f"{percentile(values, 50):.{digits}f} / {percentile(values, 99):.{digits}f}"


# --- media ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    """One spoken question: the recorded file a browser would send, and the raw microphone
    samples a streaming client would send instead."""

    text: str
    webm: bytes
    pcm: bytes
    audio_s: float
    speech_s: float


def build_clips(count: int, seed: int = 0) -> list[Clip]:
    """espeak-ng questions padded with quiet room to 2-6 s in all."""
    rng = random.Random(seed)
    clips: list[Clip] = []
    for i in range(count):
        text = QUESTIONS[i % len(QUESTIONS)]
        speech = decode_audio(espeak_wav(text), max_seconds=30, max_bytes=10_000_000)
        speech_s = len(speech) / RATE
        total = rng.uniform(max(2.0, speech_s + 0.6), max(min(6.0, speech_s + 2.0), 2.0))
        lead = rng.uniform(0.3, max(0.3, total - speech_s - 0.3))
        tail = max(0.3, total - speech_s - lead)
        x = np.concatenate([quiet_room(lead, seed=i), speech, quiet_room(tail, seed=1000 + i)])
        clips.append(Clip(text, encode_opus(x, "webm"), pcm16(x), len(x) / RATE, speech_s))
    return clips


def photo_jpeg(width: int, height: int, seed: int, quality: int = 90) -> bytes:
    """Photo-like: smooth colour fields (a low-res random field upscaled) plus sensor noise,
    so the JPEG costs what a camera picture costs to decode (noise alone would not)."""
    rng = np.random.default_rng(seed)
    field_ = rng.integers(30, 226, (max(2, height // 150), max(2, width // 150), 3), np.uint8)
    smooth = Image.fromarray(field_).resize((width, height), Image.Resampling.BICUBIC)
    noisy = np.asarray(smooth, dtype=np.int16) + rng.integers(-10, 11, (height, width, 3))
    return encode_image(Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)), "JPEG",
                        quality=quality)  # fmt: skip


def with_comment(jpeg: bytes, tag: int) -> bytes:
    """The same picture with a JPEG comment segment: other bytes, other sha256, same pixels
    (so every item is a cache miss without paying to encode another 12 MP image)."""
    payload = f"bench {tag}".encode()
    return jpeg[:2] + b"\xff\xfe" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def image_set(width: int, height: int, count: int, bases: int = 3) -> list[bytes]:
    base = [photo_jpeg(width, height, seed) for seed in range(bases)]
    return [with_comment(base[i % bases], i) for i in range(count)]


# --- (a) in-process throughput --------------------------------------------------------------


@dataclass
class SpeechRun:
    name: str
    latency_ms: list[float] = field(default_factory=list)
    rtf: list[float] = field(default_factory=list)  # per clip: processing / audio seconds
    audio_s: float = 0.0
    wall_s: float = 0.0
    word_recall: float = 0.0  # share of the question's words in the transcript (a sanity check)

    @property
    def audio_per_s(self) -> float:
        return self.audio_s / self.wall_s if self.wall_s else math.nan


def run_speech(
    name: str, pipelines: list[SpeechPipeline], clips: list[Clip], threads: int
) -> SpeechRun:
    """Clips from a shared queue, `threads` threads, thread i on pipelines[i % len]: one
    shared pipeline is what the worker does (its models serialise callers with locks)."""
    todo: queue.Queue[Clip] = queue.Queue()
    for clip in clips:
        todo.put(clip)
    run = SpeechRun(name)
    found: list[tuple[int, int]] = []
    lock = threading.Lock()
    ref = MediaRef(kind=MediaKind.AUDIO, sha256="0" * 64)

    def work(index: int) -> None:
        pipeline = pipelines[index % len(pipelines)]
        while True:
            try:
                clip = todo.get_nowait()
            except queue.Empty:
                return
            started = time.perf_counter()
            heard = pipeline.recognize(clip.webm, ref)
            elapsed = time.perf_counter() - started
            expected = set(words(clip.text))
            with lock:
                run.latency_ms.append(elapsed * 1000)
                run.rtf.append(elapsed / clip.audio_s)
                found.append((len(expected & set(words(heard.text))), len(expected)))
                progress(f"\r  {name}: {len(run.latency_ms)}/{len(clips)}", end="")

    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    run.wall_s = time.perf_counter() - started
    run.audio_s = sum(c.audio_s for c in clips)
    run.word_recall = sum(f for f, _ in found) / max(1, sum(n for _, n in found))
    progress("")
    return run


@dataclass
class ImageRun:
    name: str
    latency_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def per_s(self) -> float:
        return len(self.latency_ms) / self.wall_s if self.wall_s else math.nan


def run_images(name: str, images: list[bytes], limits: ImageLimits, threads: int) -> ImageRun:
    run = ImageRun(name)

    def one(data: bytes) -> float:
        started = time.perf_counter()
        preprocess_image(data, limits)
        return (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        run.latency_ms = list(pool.map(one, images))
    run.wall_s = time.perf_counter() - started
    return run


async def run_vision_cache(
    settings: Settings, images: list[bytes], label: str
) -> tuple[ImageRun, ImageRun]:
    """`VisionPipeline.prepare` as the worker calls it (bytes in the blob store, the tensor
    stored back): each image once (miss: load, decode, resize, store 1.3 MB), then again
    (hit: one Redis read of the stored metadata, decoding skipped)."""
    redis = redis_client(settings.redis_url)
    names = RedisNames.for_namespace(settings.namespace)
    blobs = RedisBlobStore(redis, names)
    vision = VisionPipeline.from_settings(settings, blobs)
    miss, hit = ImageRun(f"{label} miss"), ImageRun(f"{label} hit")
    keys: list[str] = []
    try:
        refs = []
        for data in images:
            sha = sha256_hex(data)
            await blobs.put(sha, data, ttl_s=settings.media_ttl_s)
            refs.append(MediaRef(kind=MediaKind.IMAGE, sha256=sha, size_bytes=len(data)))
            keys += [sha, vision.tensor_key(sha), vision.tensor_key(sha) + ":meta"]

        async def load(ref: MediaRef) -> bytes:
            data = await blobs.get(ref.sha256)
            assert data is not None
            return data

        for run in (miss, hit):
            started = time.perf_counter()
            for ref in refs:
                t0 = time.perf_counter()
                await vision.prepare(ref, load)
                run.latency_ms.append((time.perf_counter() - t0) * 1000)
            run.wall_s = time.perf_counter() - started
        assert vision.stats.tensor_hits == len(refs), vision.stats  # every second pass hit
    finally:
        await redis.delete(*(names.blob_key(k) for k in keys))
        await vision.aclose()
        await redis.aclose()
    return miss, hit


async def part_a(args: argparse.Namespace, settings: Settings, clips: list[Clip]) -> dict:
    progress("[a] in-process throughput (no Kafka)")
    progress("  loading Silero VAD + Whisper tiny.en")
    shared = SpeechPipeline.load(
        max_seconds=settings.max_audio_s,
        max_bytes=settings.max_media_bytes,
        asr_threads=settings.asr_threads,
    )
    shared.warm()
    run_speech("warm-up", [shared], clips[:2], 1)
    singles = [
        SpeechPipeline.load(
            max_seconds=settings.max_audio_s, max_bytes=settings.max_media_bytes, asr_threads=1
        )
        for _ in range(2)
    ]
    for p in singles:
        p.warm()
    t = settings.asr_threads
    speech = [
        run_speech(f"sequential ({t} ASR threads)", [shared], clips, 1),
        run_speech(f"2 threads, shared pipeline ({t} ASR threads)", [shared], clips, 2),
        run_speech("2 threads, 2 pipelines (1 ASR thread each)", singles, clips, 2),
    ]
    del shared, singles

    limits = ImageLimits(
        max_bytes=settings.max_media_bytes,
        max_pixels=settings.max_image_pixels,
        target=settings.image_size,
        patch=settings.image_patch,
    )
    progress("  making photo-like JPEGs")
    small = image_set(1024, 768, args.small_images)
    large = image_set(4000, 3000, args.large_images)
    progress(f"  1024x768: {len(small[0]) / 1e3:.0f} kB, 4000x3000: {len(large[0]) / 1e6:.1f} MB")
    images: list[ImageRun] = []
    for label, data in (("1024x768", small), ("4000x3000", large)):
        run_images("warm-up", data[:2], limits, 1)
        for threads in (1, 2):
            progress(f"  preprocess_image {label}, {threads} thread(s)")
            images.append(run_images(f"{label}, {threads} thread(s)", data, limits, threads))
    cache: list[ImageRun] = []
    for label, data in (("1024x768", small), ("4000x3000", large)):
        progress(f"  VisionPipeline.prepare {label}: miss, then hit")
        cache += await run_vision_cache(settings, data, label)
    return {"speech": speech, "images": images, "cache": cache}


def report_a(a: dict) -> dict:
    print("\n(a) speech: decode → VAD → ASR in-process (WebM/Opus, 2-6 s clips)")
    print(
        f"{'run':<46} {'latency ms p50/p99':>19} {'RTF p50/p99':>13} "
        f"{'audio-s/s':>9} {'RTF all':>7} {'words':>6}"
    )
    speech_rows = []
    for r in a["speech"]:
        rtf_all = r.wall_s / r.audio_s
        print(
            f"{r.name:<46} {cell(r.latency_ms, 0):>19} {cell(r.rtf, 3):>13} "
            f"{r.audio_per_s:9.2f} {rtf_all:7.3f} {r.word_recall:6.0%}"
        )
        speech_rows.append(
            {
                "run": r.name,
                "latency_ms": summary(r.latency_ms),
                "rtf": summary(r.rtf),
                "audio_s_per_s": r.audio_per_s,
                "rtf_aggregate": rtf_all,
                "speed_vs_real_time": r.audio_per_s,
                "word_recall": r.word_recall,
                "clips": len(r.latency_ms),
                "audio_s": r.audio_s,
            }
        )
    print("  (RTF < 1: faster than real time; audio-s/s is the ratio to real time)")

    print("\n(a) images: preprocess_image (decode with JPEG draft → letterbox 336 → normalise)")
    print(f"{'run':<30} {'latency ms p50/p99':>19} {'images/s':>9}")
    image_rows = []
    for r in a["images"]:
        print(f"{r.name:<30} {cell(r.latency_ms, 2):>19} {r.per_s:9.1f}")
        image_rows.append({"run": r.name, "latency_ms": summary(r.latency_ms), "per_s": r.per_s})
    print("\n(a) VisionPipeline.prepare on Redis: tensor not stored (miss) vs stored (hit)")
    print(f"{'images':<12} {'miss p50/p99':>17} {'hit p50/p99':>15} {'miss/hit p50':>12}")
    cache = a["cache"]
    cache_rows = []
    for miss, hit in zip(cache[::2], cache[1::2], strict=True):
        label = miss.name.removesuffix(" miss")
        ratio = percentile(miss.latency_ms, 50) / percentile(hit.latency_ms, 50)
        print(
            f"{label:<12} {cell(miss.latency_ms, 2):>17} {cell(hit.latency_ms, 2):>15} "
            f"{ratio:11.1f}x"
        )
        cache_rows.append(
            {
                "images": label,
                "miss_ms": summary(miss.latency_ms),
                "hit_ms": summary(hit.latency_ms),
                "miss_over_hit_p50": ratio,
            }
        )
    return {"speech": speech_rows, "images": image_rows, "vision_cache": cache_rows}


# --- (b), (c) through the pipeline ----------------------------------------------------------


@dataclass
class Turn:
    """One turn as the client saw it, with wall-clock stamps to line up with the server's."""

    kind: str
    turn_id: str = ""
    sent_wall_ms: float = 0.0
    ttft_ms: float = math.nan  # client: turn sent (speech over) → first text
    transcript_ms: float = math.nan  # client: turn sent → input.transcript
    first_wall_ms: float = math.nan
    queue_ms: float = math.nan
    server_ttft_ms: float = math.nan
    ok: bool = False
    transcript: str = ""


async def timed_turn(
    client: EdgeClient, kind: str, text: str, max_tokens: int, parts: list | None = None
) -> Turn:
    """Send a turn, then follow it to `response.done`. The clock starts as the turn leaves."""
    turn = Turn(kind)
    turn.sent_wall_ms = time.time() * 1000
    started = time.perf_counter()
    turn.turn_id = await client.start_turn(
        f"bench-pre-{uuid.uuid4().hex[:12]}",
        text,
        parts=parts or [],
        max_tokens=max_tokens,
        temperature=0.0,
    )
    async for event in client.events(turn.turn_id, wait_s=120):
        now = (time.perf_counter() - started) * 1000
        if isinstance(event, InputTranscript):
            turn.transcript_ms = now
            turn.transcript = event.text
        elif isinstance(event, ResponseDelta) and math.isnan(turn.ttft_ms):
            turn.ttft_ms = now
            turn.first_wall_ms = time.time() * 1000
        elif isinstance(event, ResponseDone):
            turn.ok = event.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
            turn.queue_ms = event.timings.queue_ms
            turn.server_ttft_ms = event.timings.ttft_ms or math.nan
            if not turn.ok:
                progress(f"\n  turn {turn.turn_id} ({kind}) failed: {event.error}")
    return turn


async def text_turns(
    url: str, token: str, streams: int, rounds: int, *, text: str, mt: int
) -> list[Turn]:
    """`streams` connections, each sending `rounds` turns back to back (new conversations)."""
    turns: list[Turn] = []

    async def one(client: EdgeClient) -> None:
        for _ in range(rounds):
            turns.append(await timed_turn(client, f"text x{streams}", text, mt))

    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(EdgeClient.connect(url, token)) for _ in range(streams)
        ]
        await asyncio.gather(*(one(c) for c in clients))
    return turns


async def spoken_turns(url: str, token: str, clips: list[Clip], rounds: int, mt: int) -> list[Turn]:
    """Per round, one question three ways, interleaved: the WebM clip in the turn, the PCM
    streamed with `audio.append` first (clock from the last piece), and typed."""
    turns: list[Turn] = []
    async with EdgeClient.connect(url, token) as client:
        for i in range(rounds):
            clip = clips[i % len(clips)]
            turns.append(await timed_turn(client, "spoken", "", mt, [audio_part(clip.webm)]))
            stream = f"mic-{i}"
            await client.append_audio(stream, clip.pcm)
            parts = [audio_part(stream_id=stream)]
            turns.append(await timed_turn(client, "streamed", "", mt, parts))
            turns.append(await timed_turn(client, "typed", clip.text, mt))
            progress(f"\r  spoken/streamed/typed: {i + 1}/{rounds}", end="")
    progress("")
    return turns


HOPS = (
    ("client → edge accept", "accept"),
    ("edge → turns.submitted", "submit"),
    ("preprocess hop", "preprocess"),
    ("assembly hop", "assembly"),
    ("inference pickup", "pickup"),
    ("engine first token", "engine"),
    ("relay → client", "relay"),
)


async def hop_split(settings: Settings, turns: list[Turn]) -> dict[str, dict[str, float]]:
    """Per turn, wall-clock hops from Kafka record timestamps (producer clock, ms) and the
    turn's own stamps: submitted_at (edge), queue/ttft (worker), first text (client)."""
    ns = settings.namespace
    stamps: dict[str, dict[str, tuple[int, object]]] = {}
    for name, spec in (("sub", TURNS_SUBMITTED), ("enr", TURNS_ENRICHED), ("asm", TURNS_ASSEMBLED)):
        records = await records_so_far(settings.kafka_bootstrap, spec.full_name(ns), lambda r: True)
        for record in records:
            event = decode(record.value)
            stamps.setdefault(event.turn_id, {})[name] = (record.timestamp, event)
    split: dict[str, dict[str, float]] = {}
    for t in turns:
        s = stamps.get(t.turn_id, {})
        if not t.ok or len(s) != 3:
            continue
        submitted = s["sub"][1]
        accepted = submitted.submitted_at_ms
        started = accepted + t.queue_ms
        first = accepted + t.server_ttft_ms
        split[t.turn_id] = {
            "accept": accepted - t.sent_wall_ms,
            "submit": s["sub"][0] - accepted,
            "preprocess": s["enr"][0] - s["sub"][0],
            "assembly": s["asm"][0] - s["enr"][0],
            "assembly_publish": s["asm"][0] - s["asm"][1].assembled_at_ms,
            "pickup": started - s["asm"][0],
            "engine": first - started,
            "relay": t.first_wall_ms - first,
            "preprocess_ms_field": s["enr"][1].preprocess_ms,
            "total": t.first_wall_ms - t.sent_wall_ms,
        }
    return split


async def part_bc(args: argparse.Namespace, clips: list[Clip]) -> dict:
    levels = [int(x) for x in args.text_concurrency.split(",")]
    settings = Settings.from_env(
        namespace=f"bench-pre-{uuid.uuid4().hex[:6]}",
        edge_port=free_port(),
        engine="fake",
        fake_token_interval_ms=args.token_interval_ms,
        max_inflight_turns=max(64, max(levels) * 2),
    )
    await asyncio.to_thread(
        subprocess.run, [str(REPO / "infra" / "services.sh"), "start"], check=True, cwd=REPO,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    text, mt = QUESTIONS[0], args.max_tokens
    decoding = DecodingParams(max_tokens=mt, temperature=0.0)

    progress(f"[b] direct baseline: fake engine in-process ({args.token_interval_ms} ms/token)")
    engine = FakeEngine(args.token_interval_ms / 1000)
    direct = {}
    for n in levels:
        rounds = max(1, args.text_turns // n)
        direct[n] = await run_direct(engine, n, rounds, text=text, decoding=decoding, stagger_s=0)

    progress(f"[b] pipeline (namespace {settings.namespace})")
    base = Settings.from_env()
    children = await asyncio.to_thread(start_pipeline, settings, "fake", base.state_path / "logs")
    try:
        url = f"ws://127.0.0.1:{settings.edge_port}/"
        token = mint_token(settings.auth_secret, "bench", "bench")
        await text_turns(url, token, 2, 2, text=text, mt=mt)  # warm-up: group joins, connections
        progress("[c] first spoken turn after start (the worker loads Whisper lazily)")
        cold = await spoken_turns(url, token, clips[:1], 1, mt)
        pipeline: dict[int, list[Turn]] = {}
        for n in levels:
            rounds = max(1, args.text_turns // n)
            progress(f"  text turns: {n} stream(s) x {rounds}")
            pipeline[n] = await text_turns(url, token, n, rounds, text=text, mt=mt)
        progress("[c] spoken vs typed questions")
        spoken = await spoken_turns(url, token, clips, args.spoken_rounds, mt)
    finally:
        await asyncio.to_thread(stop_roles, children)
    progress("  reading turns.submitted / enriched / assembled back")
    every = [t for ts in pipeline.values() for t in ts] + spoken + cold
    split = await hop_split(settings, every)
    return {
        "settings": settings,
        "levels": levels,
        "direct": direct,
        "pipeline": pipeline,
        "spoken": spoken,
        "cold": cold,
        "split": split,
    }


def report_b(bc: dict) -> dict:
    out: dict = {"text": [], "hops": {}}
    print("\n(b) text turns, fake engine: TTFT at the client (ms)")
    print(f"{'streams':>7} {'q':>4} {'direct':>8} {'pipeline':>9} {'added':>8} {'ratio':>6}")
    for n in bc["levels"]:
        turns = [t for t in bc["pipeline"][n] if t.ok]
        for c in compare("ttft", bc["direct"][n].ttft_ms, [t.ttft_ms for t in turns]):
            print(
                f"{n:>7} p{c.q:<3.0f} {c.direct_ms:8.2f} {c.pipeline_ms:9.2f} "
                f"{c.added_ms:8.2f} {c.ratio:6.2f}"
            )
            out["text"].append({"streams": n, **asdict(c), "added_ms": c.added_ms,
                                "ratio": c.ratio})  # fmt: skip
        failed = len(bc["pipeline"][n]) - len(turns)
        if failed:
            print(f"{n:>7} {failed} turns failed")
    groups = {f"text x{n}": bc["pipeline"][n] for n in bc["levels"]}
    for kind in ("spoken", "streamed", "typed"):
        groups[kind] = [t for t in bc["spoken"] if t.kind == kind]
    print("\n(b) where TTFT goes, per hop (ms, p50 / p99; Kafka timestamps have 1 ms steps)")
    header = f"{'hop':<24}" + "".join(f"{g:>17}" for g in groups)
    print(header)
    split = bc["split"]
    rows = [
        *HOPS,
        ("  sum = client TTFT", "total"),
        ("TurnEnriched.preprocess_ms", "preprocess_ms_field"),
        ("assembled record ts - _at", "assembly_publish"),
    ]
    for label, key in rows:
        line = f"{label:<24}"
        for g, turns in groups.items():
            values = [split[t.turn_id][key] for t in turns if t.turn_id in split]
            line += f"{cell(values):>17}"
            out["hops"].setdefault(g, {})[key] = summary(values)
        print(line)
    print(
        "  preprocess hop = Kafka delivery to the preprocess worker + its work + its publish;\n"
        "  assembly hop = Kafka delivery to faust + assembly + publish; preprocess_ms is the\n"
        "  worker's own time (0 for text: it is only set when there is media to process);\n"
        "  the last row is faust's publish: record timestamp - TurnAssembled.assembled_at_ms"
    )
    return out


def report_c(bc: dict, speech_p50_ms: float | None) -> dict:
    kinds = {k: [t for t in bc["spoken"] if t.kind == k and t.ok] for k in ("spoken", "streamed")}
    typed = [t.ttft_ms for t in bc["spoken"] if t.kind == "typed" and t.ok]
    print("\n(c) end of speech → first token, fake engine (ms; typed = the same question as text)")
    print(
        f"{'input':<26} {'transcript p50/p99':>19} {'1st token p50/p99':>19} "
        f"{'ratio p50':>9} {'ratio p99':>9}"
    )
    print(f"{'typed':<26} {'-':>19} {cell(typed):>19} {1.0:9.2f} {1.0:9.2f}")
    out: dict = {"typed_ttft_ms": summary(typed)}
    labels = {"spoken": "WebM/Opus clip in the turn", "streamed": "PCM16 streamed before"}
    for kind, turns in kinds.items():
        ttft = [t.ttft_ms for t in turns]
        heard = [t.transcript_ms for t in turns]
        r50 = percentile(ttft, 50) / percentile(typed, 50)
        r99 = percentile(ttft, 99) / percentile(typed, 99)
        print(f"{labels[kind]:<26} {cell(heard):>19} {cell(ttft):>19} {r50:9.2f} {r99:9.2f}")
        out[kind] = {
            "transcript_ms": summary(heard),
            "ttft_ms": summary(ttft),
            "ratio_vs_typed_p50": r50,
            "ratio_vs_typed_p99": r99,
            "added_vs_typed_p50_ms": percentile(ttft, 50) - percentile(typed, 50),
        }
    cold = bc["cold"][0]
    same = [t for t in kinds["spoken"] if t.transcript == cold.transcript]  # the same clip
    warm = percentile([t.transcript_ms for t in same], 50)
    print(
        f"first spoken turn after the stack started: transcript {cold.transcript_ms:.0f} ms, "
        f"first token {cold.ttft_ms:.0f} ms (same clip later: transcript {warm:.0f} ms)"
    )
    out["cold_first_spoken"] = {
        "transcript_ms": cold.transcript_ms,
        "ttft_ms": cold.ttft_ms,
        "hops": bc["split"].get(cold.turn_id),
        "same_clip_later_transcript_ms": [t.transcript_ms for t in same],
        "same_clip_later_hops": [bc["split"].get(t.turn_id) for t in same],
    }
    if speech_p50_ms is not None:
        added = out["spoken"]["added_vs_typed_p50_ms"]
        print(
            f"spoken minus typed at p50: {added:.0f} ms; recognize() alone in-process (sequential "
            f"p50, same clips): {speech_p50_ms:.0f} ms"
        )
    bad = [t for t in bc["spoken"] if not t.ok]
    if bad:
        print(f"{len(bad)} spoken/typed turns failed")
    return out


# --- figure ---------------------------------------------------------------------------------


def cdf(ax, values: Sequence[float], label: str, style: str = "-") -> None:
    xs = sorted(v for v in values if not math.isnan(v))
    if xs:
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], style, label=label)


def plot(a: dict | None, bc: dict | None, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    (ax1, ax2), (ax3, ax4) = axes
    if a is not None:
        plot_a(ax1, ax2, a)
    if bc is not None:
        plot_bc(ax3, ax4, bc)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.suptitle("turnstream preprocessing: throughput and added latency (2-core CPU)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_a(ax1, ax2, a: dict) -> None:
    names = [r.name.replace(", ", ",\n", 1) for r in a["speech"]]
    speeds = [r.audio_per_s for r in a["speech"]]
    bars = ax1.bar(range(len(speeds)), speeds, color="tab:blue")
    for bar, r in zip(bars, a["speech"], strict=True):
        ax1.annotate(
            f"RTF {r.wall_s / r.audio_s:.3f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
        )
    ax1.axhline(1.0, color="grey", ls="--", label="real time")
    ax1.set_xticks(range(len(speeds)), names, fontsize=7)
    ax1.set_ylabel("audio seconds per wall second")
    ax1.set_title("(a) speech: decode → VAD → ASR")
    ax1.legend(fontsize=7)
    for r in a["images"] + a["cache"]:
        if "2 thread" not in r.name:
            cdf(ax2, r.latency_ms, r.name, "--" if "hit" in r.name else "-")
    ax2.set_xscale("log")
    ax2.set_xlabel("per-image latency (ms, log)")
    ax2.set_title("(a) images: preprocess_image; VisionPipeline miss vs hit")
    ax2.legend(fontsize=7)


def plot_bc(ax3, ax4, bc: dict) -> None:
    split = bc["split"]
    groups = {f"text x{n}": bc["pipeline"][n] for n in bc["levels"]}
    for kind in ("spoken", "streamed", "typed"):
        groups[kind] = [t for t in bc["spoken"] if t.kind == kind]
    width = 0.8 / len(groups)
    for g, (name, turns) in enumerate(groups.items()):
        for q, alpha in ((99, 0.35), (50, 1.0)):  # p99 as a pale bar behind p50
            heights = [
                percentile([split[t.turn_id][key] for t in turns if t.turn_id in split], q)
                for _, key in HOPS
            ]
            xs = np.arange(len(HOPS)) + (g - (len(groups) - 1) / 2) * width
            ax3.bar(xs, np.maximum(heights, 0.1), width, color=f"C{g}", alpha=alpha,
                    label=name if q == 50 else None)  # fmt: skip
    ax3.set_xticks(range(len(HOPS)), [label for label, _ in HOPS], fontsize=7, rotation=20)
    ax3.set_yscale("log")
    ax3.set_ylabel("ms per hop (solid p50, pale p99; log)")
    ax3.set_title("(b) where TTFT goes, hop by hop (fake engine)")
    ax3.legend(fontsize=7)
    for n in bc["levels"]:
        cdf(ax4, bc["direct"][n].ttft_ms, f"text x{n}, engine in-process", ":")
        cdf(ax4, [t.ttft_ms for t in bc["pipeline"][n]], f"text x{n}, pipeline")
    for kind in ("typed", "spoken", "streamed"):
        turns = [t for t in bc["spoken"] if t.kind == kind]
        cdf(ax4, [t.ttft_ms for t in turns], f"{kind}: first token")
        if kind != "typed":
            cdf(ax4, [t.transcript_ms for t in turns], f"{kind}: transcript", "--")
    ax4.set_xscale("log")
    ticks = [20, 30, 50, 100, 200, 300, 500, 1000]
    ax4.set_xticks(ticks, [str(t) for t in ticks])
    ax4.minorticks_off()
    ax4.set_xlabel("ms from sending the turn (speech over), log")
    ax4.set_title("(b, c) TTFT at the client")
    ax4.legend(fontsize=7)


# --- main -----------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> None:
    parts = set(args.parts.split(","))
    settings = Settings.from_env(namespace=f"bench-pre-{uuid.uuid4().hex[:6]}")
    started = time.perf_counter()
    progress(f"building {args.clips} spoken clips (espeak-ng → WebM/Opus)")
    clips = build_clips(args.clips)
    summary: dict = {
        "clips": [{"text": c.text, "audio_s": c.audio_s, "speech_s": c.speech_s} for c in clips],
        "args": vars(args),
    }
    a = bc = None
    if "a" in parts:
        a = await part_a(args, settings, clips)
    if parts & {"b", "c"}:
        bc = await part_bc(args, clips)
    if a is not None:
        summary["a"] = report_a(a)
    if bc is not None:
        summary["b"] = report_b(bc)
        speech_p50 = percentile(a["speech"][0].latency_ms, 50) if a else None
        summary["c"] = report_c(bc, speech_p50)
        summary["namespace"] = bc["settings"].namespace
    summary["wall_s"] = time.perf_counter() - started
    RESULTS.mkdir(parents=True, exist_ok=True)
    FIGURES.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / "preprocess"
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=2, default=str))
    plot(a, bc, stem.with_suffix(".png"))
    shutil.copyfile(stem.with_suffix(".png"), FIGURES / "preprocess.png")
    print(f"\nwrote {stem}.json, {stem}.png (copied to bench/figures/preprocess.png)")
    print(f"total {summary['wall_s']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="a,b,c", help="any of a,b,c")
    parser.add_argument("--clips", type=int, default=12, help="spoken clips for (a) and (c)")
    parser.add_argument("--small-images", type=int, default=100, help="1024x768 JPEGs")
    parser.add_argument("--large-images", type=int, default=24, help="4000x3000 JPEGs")
    parser.add_argument("--text-turns", type=int, default=200, help="per concurrency level")
    parser.add_argument("--text-concurrency", default="1,8")
    parser.add_argument("--spoken-rounds", type=int, default=12, help="x3 turns each")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--token-interval-ms", type=float, default=20.0)
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()

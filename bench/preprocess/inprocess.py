"""(a) Throughput in-process: speech and image pipelines, threads, and the vision cache."""

from __future__ import annotations

import argparse
import math
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bench.preprocess.common import cell, progress
from bench.preprocess.media import Clip, image_set
from bench.stats import percentile, summary
from harness.media import words
from runtime.blobs import RedisBlobStore, sha256_hex
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.events import MediaKind, MediaRef
from workers.preprocess.images import ImageLimits, preprocess_image
from workers.preprocess.speech import SpeechPipeline
from workers.preprocess.vision import VisionPipeline


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

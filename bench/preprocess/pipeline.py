"""(b), (c) Through the pipeline: text and spoken turns, and where each hop's time goes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass

from bench.pipeline_latency import run_direct, start_pipeline
from bench.preprocess.common import QUESTIONS, cell, progress
from bench.preprocess.media import Clip
from bench.stats import compare, percentile, summary
from harness.kafka import records_so_far
from infra.stack import REPO
from runtime.kafka_topics import ensure_topics
from runtime.processes import free_port, stop_roles
from runtime.settings import Settings
from schemas.codec import decode
from schemas.events import DecodingParams, FinishReason
from schemas.topics import TURNS_ENRICHED, TURNS_SUBMITTED, assembled_topics
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, audio_part
from ws_edge.messages import InputTranscript, ResponseDelta, ResponseDone


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
    sources = [("sub", TURNS_SUBMITTED), ("enr", TURNS_ENRICHED)]
    sources += [("asm", spec) for spec in assembled_topics(settings.pool_names)]
    for name, spec in sources:
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

"""End of turn on a labelled set of spoken utterances: how often a user who pauses
mid-sentence is cut off, and how long one who finished waits, for the silence rule
(`server_vad`) and the audio turn model (`semantic_vad` at each eagerness), in one run.

The set (`bench/turn_sets/utterances.jsonl`): sentences in English, Spanish, Chinese,
French and German, each with a natural hesitation point (`prefix`). Every sentence is
spoken by espeak-ng in its language (English also by the piper voice "joe") two ways:
*complete* (the sentence, then silence) and *paused* (the prefix, `--pause-ms` of silence,
the rest, then silence). Each clip goes through what the edge runs: Silero VAD per 32 ms
frame, the pure end-pointer (`ws_edge.voice.loop`) and, at each pause, the turn model, whose
verdict lands as many frames later as it took to compute (measured, not assumed).

- false end of turn: a paused clip whose turn ended during the pause (the user was cut off);
- wait: from the end of speech (the last frame Silero scores as speech) to the end-of-turn
  decision, on complete clips;
- the model's probability at the first pause, complete vs paused (AUC: how well it tells
  them apart on this set, whatever the threshold).

The "+ words" rules add what the edge does when a guess runs: at the pause the utterance so
far is transcribed as the preprocessing worker would (Whisper tiny.en for English, the
multilingual base for the other languages, each with its short window), and its words land
`PIPELINE_MS` after that transcription's CPU time (the Kafka and relay hops, from
`bench.voice`); words that stop mid-sentence (`ws_edge.voice.unfinished`) keep the turn
open. "+ LM" adds the preprocessing worker's text model (`sentence_end`, English; its CPU
time delays the words too), as `TURNSTREAM_SENTENCE_END_MODEL=true` does. Words the ASR
was unsure of (`ws_edge.voice.unfinished.unreadable`) keep the turn open as the edge does;
"unsure words trusted" is the rule before that.

Two sets: `utterances.jsonl` (dev: the set the audio model was first measured on) and
`utterances_heldout.jsonl` (other sentences, written before the word lists), reported apart.

    python -m bench.turn_taking                    # ~6 min on 2 cores
    python -m bench.turn_taking --pause-ms 1200 --langs en zh --sets dev

Prints a table; writes bench/results/turn_taking.json and bench/figures/turn-taking.png.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from harness.media import pcm16, quiet_room, voiced
from workers.tts.voices import VOICES, EspeakSpeaker, Voice
from ws_edge.voice.loop import (
    EAGERNESS,
    FRAME_BYTES,
    FRAME_MS,
    SpeechEnded,
    SpeechPaused,
    TurnRules,
    VadRules,
    VoiceLoop,
)
from ws_edge.voice.speech_detector import SpeechDetector
from ws_edge.voice.turn_model import TurnModel
from ws_edge.voice.unfinished import guess_unfinished, unreadable

SETS = {
    "dev": Path(__file__).parent / "turn_sets" / "utterances.jsonl",
    "held-out": Path(__file__).parent / "turn_sets" / "utterances_heldout.jsonl",
}
PIPELINE_MS = 60.0  # submitted → transcribed → relayed back to the edge, less the ASR itself
ESPEAK_VOICES = {"en": "en-us", "es": "es", "zh": "cmn", "fr": "fr", "de": "de"}
LEAD_S = 0.3
TAIL_S = 5.0  # longer than the longest wait (eagerness low: 4 s)
RULES: dict[str, TurnRules | None] = {
    "silence 500 ms": None,
    "semantic high": EAGERNESS["high"],
    "semantic medium": EAGERNESS["medium"],
    "semantic low": EAGERNESS["low"],
    "semantic high + words": EAGERNESS["high"],
    "semantic medium + words": EAGERNESS["medium"],
    "semantic medium + words + LM": EAGERNESS["medium"],
    # as before 2026-12-07: words the ASR was unsure of count as any others
    "semantic medium + words + LM, unsure words trusted": EAGERNESS["medium"],
    # the same, the client naming its user's language (`turn_detection.language`): Whisper
    # base transcribes in it instead of detecting it (English: tiny.en either way)
    "semantic medium + words + LM, language given": EAGERNESS["medium"],
    "semantic low + words + LM": EAGERNESS["low"],
}


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Clip:
    set: str
    lang: str
    voice: str
    kind: str  # complete | paused
    text: str
    pcm: bytes
    speech_end_ms: float  # complete: end of the sentence; paused: end of the prefix
    resume_ms: float  # paused: where the rest starts (inf for complete)


def speech(voice: Voice, text: str) -> np.ndarray:
    """The voice saying `text`, 16 kHz float32, without the silence it trails."""
    x = voiced(voice, text)
    loud = np.nonzero(np.abs(x) > 0.01)[0]
    return x[: loud[-1] + 1] if len(loud) else x


def clips(rows: list[dict], pause_s: float) -> list[Clip]:
    out: list[Clip] = []
    joe = VOICES["joe"]()
    for i, row in enumerate(rows):
        progress(f"speaking {i + 1}/{len(rows)} ({row['set']} {row['lang']})")
        voices: list[tuple[str, Voice]] = [("espeak", EspeakSpeaker(ESPEAK_VOICES[row["lang"]]))]
        if row["lang"] == "en":
            voices.append(("joe", joe))
        rest = row["complete"][len(row["prefix"]) :].strip()
        for name, voice in voices:
            lead = quiet_room(LEAD_S, seed=i)
            whole = speech(voice, row["complete"])
            out.append(
                Clip(
                    row["set"],
                    row["lang"],
                    name,
                    "complete",
                    row["complete"],
                    pcm16(np.concatenate([lead, whole, quiet_room(TAIL_S, seed=i + 1)])),
                    1000 * (LEAD_S + len(whole) / 16_000),
                    math.inf,
                )
            )
            first, second = speech(voice, row["prefix"]), speech(voice, rest)
            gap = quiet_room(pause_s, seed=i + 2)
            parts = [lead, first, gap, second, quiet_room(TAIL_S, seed=i + 3)]
            out.append(
                Clip(
                    row["set"],
                    row["lang"],
                    name,
                    "paused",
                    f"{row['prefix']} … {rest}",
                    pcm16(np.concatenate(parts)),
                    1000 * (LEAD_S + len(first) / 16_000),
                    1000 * (LEAD_S + (len(first) + len(gap)) / 16_000),
                )
            )
    return out


@dataclass
class Outcome:
    ended_at_ms: float | None  # when the end of turn was decided (clip time)
    end_ms: float | None  # where the loop put the end of speech
    first_probability: float | None
    model_calls: int
    model_ms: float


class Ears:
    """The guess's transcription as the preprocessing worker makes it (cached per audio)."""

    def __init__(self) -> None:
        from runtime.settings import Settings
        from runtime.smollm2 import default_model_dir
        from runtime.whisper_models import base_path
        from workers.preprocess.asr import WhisperTranscriber
        from workers.preprocess.sentence_end import SentenceEnd

        self.english = WhisperTranscriber(cpu_threads=1)
        self.multilingual = WhisperTranscriber(
            base_path(Settings().state_path / "models"), cpu_threads=1, language=None
        )
        self.sentence_end = SentenceEnd(default_model_dir(Settings()))
        self._heard: dict[tuple[int, str, bool], tuple[str, float, float, float, bool]] = {}

    def hear(
        self, pcm: bytes, lang: str, *, given: bool = False
    ) -> tuple[str, float, float, float, bool]:
        """The words, the CPU ms they took, the text model's P(the message ends here) (-1:
        not judged), the CPU ms it took and whether the ASR was sure enough to read them.
        `given`: the language is the client's hint."""
        key = (hash(pcm), lang, given)
        if key not in self._heard:
            from workers.preprocess.vad import SpeechSegment

            audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
            whisper = self.english if lang == "en" else self.multilingual
            started = time.process_time()
            heard = whisper.transcribe(
                audio, [SpeechSegment(0.0, len(audio) / 16_000)], language=lang if given else None
            )
            asr_ms = 1000 * (time.process_time() - started)
            started = time.process_time()
            ends = self.sentence_end.probability(heard.text, heard.language)
            lm_ms = 1000 * (time.process_time() - started)
            readable = not unreadable(heard.logprob, heard.language_probability)
            self._heard[key] = (heard.text, asr_ms, ends, lm_ms, readable)
        return self._heard[key]


def run_clip(
    clip: Clip,
    turn: TurnRules | None,
    model: TurnModel,
    probs: list[float],
    ears: Ears | None = None,
    *,
    text_model: bool = False,
    language_given: bool = False,
    trust_unsure: bool = False,
) -> Outcome:
    """The clip through the end-pointer; the model's verdicts land after their compute time,
    and with `ears` (a guess at each pause) its words after their transcription's."""
    loop = VoiceLoop(VadRules() if ears else VadRules(early_silence_ms=0), turn)
    frames = loop.append(clip.pcm)
    # answers on their way: (frame they land on, when they were ready, the answer)
    late: list[tuple[int, float, Callable[[], list]]] = []
    calls, spent, first = 0, 0.0, None
    for k, prob in enumerate(probs):
        landed, late = [a for a in late if k >= a[0]], [a for a in late if k < a[0]]
        for _, done_ms, answer in landed:
            for event in answer():
                if isinstance(event, SpeechEnded):
                    return Outcome(done_ms, event.end_ms, first, calls, spent)
        events = loop.scored(
            frames[k * FRAME_BYTES : (k + 1) * FRAME_BYTES], [prob], assistant_speaking=False
        )
        now_ms = (k + 1) * FRAME_MS
        for event in events:
            if isinstance(event, SpeechEnded):
                return Outcome(now_ms, event.end_ms, first, calls, spent)
            if isinstance(event, SpeechPaused) and event.check:
                started = time.perf_counter()
                p = model.probability(event.pcm)
                took = (time.perf_counter() - started) * 1000
                calls, spent = calls + 1, spent + took
                first = p if first is None else first
                due, pause_id = k + 1 + math.ceil(took / FRAME_MS), event.pause_id
                late.append((due, now_ms + took, partial(loop.turn_verdict, pause_id, p)))
            if isinstance(event, SpeechPaused) and event.guess and ears is not None:
                text, asr_ms, ends, lm_ms, readable = ears.hear(
                    event.pcm, clip.lang, given=language_given
                )
                if not text_model:  # TURNSTREAM_SENTENCE_END_MODEL=false: the lists alone
                    ends, lm_ms = -1.0, 0.0
                took = asr_ms + lm_ms + PIPELINE_MS
                due = k + 1 + math.ceil(took / FRAME_MS)
                unfinished = guess_unfinished(
                    text, clip.lang, ends, readable=readable or trust_unsure
                )
                answer = partial(loop.words_verdict, event.pause_id, unfinished)
                late.append((due, now_ms + took, answer))
    return Outcome(None, None, first, calls, spent)


def auc(positives: list[float], negatives: list[float]) -> float:
    """P(a complete clip scores above a paused one): 0.5 is chance."""
    if not positives or not negatives:
        return math.nan
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def summarise(results: list[dict]) -> list[dict]:
    rows = []
    groups = [*sorted({(r["lang"], r["voice"]) for r in results}), ("all", "all")]
    sets = [*dict.fromkeys(r["set"] for r in results), "all"]
    for set_name, (lang, voice) in ((s, g) for s in sets for g in groups):
        mine = [
            r
            for r in results
            if set_name in ("all", r["set"])
            and (lang == "all" or (r["lang"], r["voice"]) == (lang, voice))
        ]
        if not mine:
            continue
        for rule in RULES:
            runs = [r for r in mine if r["rule"] == rule]
            paused = [r for r in runs if r["kind"] == "paused"]
            complete = [r for r in runs if r["kind"] == "complete"]
            waits = [r["wait_ms"] for r in complete if r["wait_ms"] is not None]
            calls = [r["model_calls"] for r in runs]
            rows.append(
                {
                    "set": set_name,
                    "lang": lang,
                    "voice": voice,
                    "rule": rule,
                    "paused": len(paused),
                    "false_end_rate": sum(r["cut_off"] for r in paused) / max(1, len(paused)),
                    "complete": len(complete),
                    "never_ended": sum(r["wait_ms"] is None for r in complete),
                    "wait_mean_ms": float(np.mean(waits)) if waits else math.nan,
                    "wait_p50_ms": percentile(waits, 50) if waits else math.nan,
                    "wait_p90_ms": percentile(waits, 90) if waits else math.nan,
                    "model_calls_per_clip": float(np.mean(calls)) if calls else 0.0,
                    "model_ms_per_call": (sum(r["model_ms"] for r in runs) / max(1, sum(calls))),
                    "auc": auc(
                        [r["p"] for r in complete if r["p"] is not None],
                        [r["p"] for r in paused if r["p"] is not None],
                    ),
                }
            )
    return rows


def print_table(rows: list[dict], pause_ms: float) -> None:
    print(f"end of turn, {pause_ms:g} ms pauses mid-sentence (false end = cut off in the pause)")
    print(
        f"{'set':>8} {'lang':>4} {'voice':>7} {'rule':>44} {'false end':>10} {'wait mean':>10} "
        f"{'p50/p90':>13} {'never':>6} {'calls':>6} {'ms/call':>8} {'AUC':>5}"
    )
    for r in rows:
        print(
            f"{r['set']:>8} {r['lang']:>4} {r['voice']:>7} {r['rule']:>44} "
            f"{100 * r['false_end_rate']:>5.0f}% /{r['paused']:<3} {r['wait_mean_ms']:>8.0f}ms "
            f"{r['wait_p50_ms']:>6.0f}/{r['wait_p90_ms']:<6.0f} {r['never_ended']:>6} "
            f"{r['model_calls_per_clip']:>6.2f} {r['model_ms_per_call']:>8.1f} "
            f"{r['auc'] if r['rule'] != 'silence 500 ms' else math.nan:>5.2f}"
        )


def plot(rows: list[dict], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [
        g for g in dict.fromkeys((r["set"], r["lang"], r["voice"]) for r in rows) if g[0] != "all"
    ]
    labels = [f"{lang}\n{voice}\n{set_name}" for set_name, lang, voice in groups]
    fig, (left, right) = plt.subplots(2, 1, figsize=(19, 9))
    width = 0.8 / len(RULES)
    x = np.arange(len(groups))
    for i, rule in enumerate(RULES):
        mine = {(r["set"], r["lang"], r["voice"]): r for r in rows if r["rule"] == rule}
        left.bar(
            x + i * width, [100 * mine[g]["false_end_rate"] for g in groups], width, label=rule
        )
        right.bar(x + i * width, [mine[g]["wait_mean_ms"] for g in groups], width, label=rule)
    left.axhline(5, color="red", linestyle="--", label="5% target")
    left.set_ylabel(f"% of paused utterances cut off ({args.pause_ms:g} ms pause)")
    right.set_ylabel("mean wait after a complete utterance, ms")
    for ax, title in ((left, "false end of turn"), (right, "wait after the user finished")):
        ax.set_xticks(x + width * (len(RULES) - 1) / 2, labels)
        ax.set_title(title)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    fig.suptitle(
        f"end of turn on spoken utterances (bench.turn_taking, {time.strftime('%Y-%m-%d')})"
    )
    fig.tight_layout()
    save_figure(fig, "turn-taking")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.turn_taking")
    parser.add_argument("--pause-ms", type=float, default=800.0)
    parser.add_argument("--langs", nargs="+", default=list(ESPEAK_VOICES))
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    args = parser.parse_args()
    rows = [
        {**json.loads(line), "set": name}
        for name in args.sets
        for line in SETS[name].read_text().splitlines()
        if line.strip()
    ]
    rows = [r for r in rows if r["lang"] in args.langs]
    made = clips(rows, args.pause_ms / 1000)
    model = TurnModel()
    ears = Ears()
    results = []
    for i, clip in enumerate(made):
        if i % 10 == 0:
            progress(f"clip {i + 1}/{len(made)}")
        detector = SpeechDetector()
        probs = detector.score(clip.pcm[: len(clip.pcm) - len(clip.pcm) % FRAME_BYTES])
        for rule, turn in RULES.items():
            words = "+ words" in rule
            lm = "+ LM" in rule
            given = "language given" in rule
            trusted = "unsure words trusted" in rule
            out = run_clip(
                clip,
                turn,
                model,
                probs,
                ears if words else None,
                text_model=lm,
                language_given=given,
                trust_unsure=trusted,
            )
            cut_off = (
                clip.kind == "paused"
                and out.ended_at_ms is not None
                and out.ended_at_ms < clip.resume_ms + 100  # before the rest was heard
            )
            wait = (
                out.ended_at_ms - out.end_ms
                if clip.kind == "complete" and out.ended_at_ms is not None and out.end_ms
                else None
            )
            results.append(
                {
                    "set": clip.set,
                    "lang": clip.lang,
                    "voice": clip.voice,
                    "kind": clip.kind,
                    "text": clip.text,
                    "rule": rule,
                    "cut_off": cut_off,
                    "wait_ms": wait,
                    "p": out.first_probability,
                    "model_calls": out.model_calls,
                    "model_ms": out.model_ms,
                }
            )
    table = summarise(results)
    print_table(table, args.pause_ms)
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "args": vars(args),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "rows": table,
        "raw": results,
    }
    (RESULTS / "turn_taking.json").write_text(json.dumps(payload, indent=2))
    plot(table, args)
    print(f"wrote {RESULTS / 'turn_taking.json'} and bench/figures/turn-taking.png")


if __name__ == "__main__":
    main()

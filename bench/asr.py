"""Speech recognition, as the preprocessing worker runs it, on the spoken sentences of
`bench/turn_sets/utterances.jsonl` (English, Spanish, Chinese, French, German; espeak-ng in
each language, piper's joe in English): CPU time per question, word error rate (character
error rate for Chinese) and how often the language is detected right, for

- tiny.en with Whisper's fixed 30 s window (the baseline, as until 2026-12-06),
- tiny.en with a window sized to the speech (`runtime/whisper_window.py`),
- the multilingual base with a window sized to the speech, detecting the language
  (`TURNSTREAM_ASR_MODEL=multilingual`), and with the client's language hint.

English-only tiny.en is scored on English only. One thread per model, as the worker's
default (`TURNSTREAM_ASR_THREADS=1`).

    python -m bench.asr                # ~3 min on 2 cores

Prints a table; writes bench/results/asr.json and bench/figures/asr.png.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from harness.media import quiet_room, voiced
from runtime.settings import Settings
from runtime.whisper_models import base_path
from workers.preprocess.asr import WhisperTranscriber
from workers.preprocess.vad import SpeechSegment
from workers.tts.voices import VOICES, Voice, espeak_for

SET = Path(__file__).parent / "turn_sets" / "utterances.jsonl"


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def tokens(text: str, language: str) -> list[str]:
    """Words, or for Chinese its Han characters (no spaces to split on)."""
    if language == "zh":
        return [c for c in text if "\u4e00" <= c <= "\u9fff"]
    return re.sub(r"[^\w ]", " ", text.lower()).split()


def edits(reference: list[str], heard: list[str]) -> int:
    row = list(range(len(heard) + 1))
    for i in range(1, len(reference) + 1):
        prev, row[0] = row[0], i
        for j in range(1, len(heard) + 1):
            cost = reference[i - 1] != heard[j - 1]
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + cost)
    return row[len(heard)]


def clips() -> list[tuple[str, str, str, np.ndarray]]:
    """(language, voice, text, clip) for every sentence and voice."""
    rows = [json.loads(line) for line in SET.read_text().splitlines() if line.strip()]
    joe: Voice = VOICES["joe"]()
    out = []
    for row in rows:
        voices: list[tuple[str, Voice | None]] = [("espeak", espeak_for(row["lang"]))]
        if row["lang"] == "en":
            voices.append(("joe", joe))
        for name, voice in voices:
            assert voice is not None
            speech = voiced(voice, row["complete"])
            clip = np.concatenate([quiet_room(0.2), speech, quiet_room(0.3)])
            out.append((row["lang"], name, row["complete"], clip))
    return out


def run(name: str, asr: WhisperTranscriber, made: list, hint: bool) -> list[dict]:
    results = []
    asr.load()
    for i, (language, voice, text, clip) in enumerate(made):
        if i % 20 == 0:
            progress(f"{name}: {i + 1}/{len(made)}")
        segments = [SpeechSegment(0.0, len(clip) / 16_000)]
        started = time.process_time()
        heard = asr.transcribe(clip, segments, language=language if hint else None)
        cpu_ms = (time.process_time() - started) * 1000
        reference = tokens(text, language)
        results.append(
            {
                "setup": name,
                "language": language,
                "voice": voice,
                "cpu_ms": cpu_ms,
                "errors": edits(reference, tokens(heard.text, language)),
                "reference": len(reference),
                "detected": heard.language,
                "heard": heard.text,
            }
        )
    return results


def summarise(results: list[dict]) -> list[dict]:
    rows = []
    for setup in dict.fromkeys(r["setup"] for r in results):
        mine = [r for r in results if r["setup"] == setup]
        for group in [*sorted({(r["language"], r["voice"]) for r in mine}), ("all", "all")]:
            sel = [
                r for r in mine if group == ("all", "all") or (r["language"], r["voice"]) == group
            ]
            cpu = [r["cpu_ms"] for r in sel]
            rows.append(
                {
                    "setup": setup,
                    "language": group[0],
                    "voice": group[1],
                    "clips": len(sel),
                    "cpu_p50_ms": percentile(cpu, 50),
                    "cpu_p90_ms": percentile(cpu, 90),
                    "error_rate": sum(r["errors"] for r in sel)
                    / max(1, sum(r["reference"] for r in sel)),
                    "language_right": sum(r["detected"] == r["language"] for r in sel) / len(sel),
                }
            )
    return rows


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    totals = [r for r in rows if r["language"] == "all"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    names = [r["setup"] for r in totals]
    left.bar(names, [r["cpu_p50_ms"] for r in totals])
    left.set_ylabel("CPU ms per spoken question (p50)")
    left.tick_params(axis="x", labelrotation=15)
    groups = sorted({(r["language"], r["voice"]) for r in rows if r["language"] != "all"})
    x = np.arange(len(groups))
    setups = list(dict.fromkeys(r["setup"] for r in rows))
    width = 0.8 / len(setups)
    for i, setup in enumerate(setups):
        mine = {(r["language"], r["voice"]): r for r in rows if r["setup"] == setup}
        right.bar(
            x + i * width,
            [100 * mine[g]["error_rate"] if g in mine else 0 for g in groups],
            width,
            label=setup,
        )
    right.set_xticks(x + width * (len(setups) - 1) / 2, [f"{a}\n{b}" for a, b in groups])
    right.set_ylabel("word error rate, % (Chinese: characters)")
    right.legend(fontsize=7)
    fig.suptitle(f"speech recognition on spoken questions (bench.asr, {time.strftime('%Y-%m-%d')})")
    fig.tight_layout()
    save_figure(fig, "asr")


def main() -> None:
    made = clips()
    english = [c for c in made if c[0] == "en"]
    base = base_path(Settings.from_env().state_path / "models")
    results = run("tiny.en 30 s", WhisperTranscriber(short_window=False), english, False)
    results += run("tiny.en short", WhisperTranscriber(), english, False)
    multilingual = WhisperTranscriber(base, language=None)
    results += run("base short, detected", multilingual, made, False)
    results += run("base short, hinted", multilingual, made, True)
    rows = summarise(results)
    print(
        f"{'setup':>22} {'lang':>4} {'voice':>7} {'clips':>5} {'CPU p50/p90 ms':>15} "
        f"{'error':>6} {'lang right':>10}"
    )
    for r in rows:
        print(
            f"{r['setup']:>22} {r['language']:>4} {r['voice']:>7} {r['clips']:>5} "
            f"{r['cpu_p50_ms']:>7.0f}/{r['cpu_p90_ms']:<7.0f} {100 * r['error_rate']:>5.1f}% "
            f"{100 * r['language_right']:>9.0f}%"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows, "raw": results}
    (RESULTS / "asr.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False))
    plot(rows)
    print(f"wrote {RESULTS / 'asr.json'} and bench/figures/asr.png")


if __name__ == "__main__":
    main()

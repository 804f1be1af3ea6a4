"""Short speech over the assistant's voice: does it interrupt? Commands ("stop", "wait",
"hold on", per language) should, at once; backchannels ("uh-huh", "yeah", "okay") should
not. Measured on `bench/turn_sets/interruptions.jsonl` (English, Spanish, Chinese, French,
German; espeak-ng in each language, piper's joe in English) through what the edge runs
while its assistant speaks: Silero per 32 ms frame and the pure end-pointer
(`ws_edge.voice.loop`).

For each rule: precision and recall of interruptions (a command that interrupts is a hit, a
backchannel that does is a false alarm) and, for commands that interrupt, the time from the
end of the user's speech (the last frame Silero scores as speech) to the interruption
(negative: while they were still talking).

    python -m bench.interruptions            # ~30 s

Prints a table; writes bench/results/interruptions.json and bench/figures/interruptions.png.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from harness.media import pcm16, quiet_room, voiced
from workers.tts.voices import VOICES, Voice, espeak_for
from ws_edge.voice.loop import FRAME_BYTES, BargeIn, SpeechEnded, VadRules, VoiceLoop
from ws_edge.voice.speech_detector import SpeechDetector

SET = Path(__file__).parent / "turn_sets" / "interruptions.jsonl"
RULES = {"duration 600 ms (today)": VadRules()}


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def clip(voice: Voice, text: str) -> bytes:
    return pcm16(np.concatenate([quiet_room(0.3), voiced(voice, text), quiet_room(1.5)]))


def outcome(pcm: bytes, rules: VadRules) -> dict:
    """Over the assistant's voice: when (if) it barged in, and where the speech ended."""
    loop = VoiceLoop(rules)
    frames = loop.append(pcm)
    probs = SpeechDetector().score(frames)
    barged_at = None
    for k, prob in enumerate(probs):
        frame = frames[k * FRAME_BYTES : (k + 1) * FRAME_BYTES]
        for event in loop.scored(frame, [prob], assistant_speaking=True):
            if isinstance(event, BargeIn) and barged_at is None:
                barged_at = (k + 1) * 32.0
            if isinstance(event, SpeechEnded):
                return {
                    "barged_at_ms": barged_at,
                    "speech_ms": event.duration_ms,
                    "end_ms": event.end_ms,
                }
    return {"barged_at_ms": barged_at, "speech_ms": None, "end_ms": None}


def plot(table: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    langs = list(dict.fromkeys(r["lang"] for r in table))
    x = np.arange(len(langs))
    width = 0.8 / (2 * len(RULES))
    for i, rule in enumerate(RULES):
        mine = {r["lang"]: r for r in table if r["rule"] == rule}
        ax.bar(
            x + 2 * i * width,
            [100 * mine[g]["recall"] for g in langs],
            width,
            label=f"commands that interrupt ({rule})",
        )
        ax.bar(
            x + (2 * i + 1) * width,
            [100 * mine[g]["false_alarm_rate"] for g in langs],
            width,
            label=f"backchannels that interrupt ({rule})",
        )
    ax.set_xticks(x + width * (2 * len(RULES) - 1) / 2, langs)
    ax.set_ylabel("%")
    ax.set_title(
        f"short speech over the assistant (bench.interruptions, {time.strftime('%Y-%m-%d')})"
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "interruptions")


def main() -> None:
    rows = [json.loads(line) for line in SET.read_text().splitlines() if line.strip()]
    joe = VOICES["joe"]()
    results = []
    for i, row in enumerate(rows):
        progress(f"{i + 1}/{len(rows)} {row['lang']} {row['kind']}")
        voices: list[tuple[str, Voice | None]] = [("espeak", espeak_for(row["lang"]))]
        if row["lang"] == "en":
            voices.append(("joe", joe))
        for name, voice in voices:
            assert voice is not None
            pcm = clip(voice, row["text"])
            for rule, rules in RULES.items():
                out = outcome(pcm, rules)
                results.append({**row, "voice": name, "rule": rule, **out})
    print("short speech over the assistant's voice")
    print(
        f"{'rule':>26} {'lang':>4} {'precision':>9} {'recall':>7} {'false alarms':>12} "
        f"{'speech ms p50':>13} {'stop after end p50/max':>22}"
    )
    table = []
    for rule in RULES:
        for lang in [*sorted({r["lang"] for r in results}), "all"]:
            mine = [r for r in results if r["rule"] == rule and lang in ("all", r["lang"])]
            commands = [r for r in mine if r["kind"] == "command"]
            chatter = [r for r in mine if r["kind"] == "backchannel"]
            hits = [r for r in commands if r["barged_at_ms"] is not None]
            alarms = [r for r in chatter if r["barged_at_ms"] is not None]
            after = [r["barged_at_ms"] - r["end_ms"] for r in hits if r["end_ms"] is not None]
            spoken = [r["speech_ms"] for r in mine if r["speech_ms"] is not None]
            line = {
                "rule": rule,
                "lang": lang,
                "commands": len(commands),
                "backchannels": len(chatter),
                "precision": len(hits) / max(1, len(hits) + len(alarms)),
                "recall": len(hits) / max(1, len(commands)),
                "false_alarm_rate": len(alarms) / max(1, len(chatter)),
                "speech_ms_p50": percentile(spoken, 50),
                "stop_after_end_p50_ms": percentile(after, 50),
                "stop_after_end_max_ms": max(after) if after else float("nan"),
            }
            table.append(line)
            print(
                f"{rule:>26} {lang:>4} {line['precision']:>9.2f} {line['recall']:>7.2f} "
                f"{100 * line['false_alarm_rate']:>11.0f}% {line['speech_ms_p50']:>13.0f} "
                f"{line['stop_after_end_p50_ms']:>11.0f}/{line['stop_after_end_max_ms']:<10.0f}"
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"date": time.strftime("%Y-%m-%d %H:%M"), "rows": table, "raw": results}
    (RESULTS / "interruptions.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False))
    plot(table)
    print(f"wrote {RESULTS / 'interruptions.json'} and bench/figures/interruptions.png")


if __name__ == "__main__":
    main()

"""Short speech over the assistant's voice: does it interrupt? Commands ("stop", "wait",
"hold on", per language) should, at once; backchannels ("uh-huh", "yeah", "okay") should
not. Measured on two sets (English, Spanish, Chinese, French, German; espeak-ng in each
language, piper's joe in English): `bench/turn_sets/interruptions.jsonl` (the set the
duration rule was first measured on) and `interruptions_heldout.jsonl` (other phrasings,
written before the command phrases were read against any transcript), through what the edge
runs while its assistant speaks: Silero per 32 ms frame, the pure end-pointer
(`ws_edge.voice.loop`) and, for the spotter rules, the keyword spotter
(`ws_edge.voice.command_spotter`: Whisper base), whose verdict lands as many 32 ms frames
after its check as it took to compute.

Rules, all in the same run: the duration rule alone (600 ms, the edge before the spotter);
duration + spotter with the language detected (a client that names none); duration + spotter
with the client's language.

For each: precision and recall of interruptions (a command that interrupts is a hit, a
backchannel that does is a false alarm) and, for commands that interrupt, the time from the
end of the user's speech (the last frame Silero scores as speech) to the interruption
(negative: while they were still talking); the spotter's CPU per check.

    python -m bench.interruptions            # ~2 min

Prints a table; writes bench/results/interruptions.json and bench/figures/interruptions.png.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from harness.media import pcm16, quiet_room, voiced
from runtime.settings import Settings
from workers.tts.voices import VOICES, Voice, espeak_for
from ws_edge.voice.command_spotter import CommandSpotter
from ws_edge.voice.loop import (
    FRAME_BYTES,
    FRAME_MS,
    BargeIn,
    CommandCheck,
    SpeechEnded,
    VadRules,
    VoiceLoop,
)
from ws_edge.voice.speech_detector import SpeechDetector

SETS = {
    "dev": Path(__file__).parent / "turn_sets" / "interruptions.jsonl",
    "held-out": Path(__file__).parent / "turn_sets" / "interruptions_heldout.jsonl",
}


@dataclass(frozen=True)
class Rule:
    vad: VadRules
    spotter: str = ""  # "": none; "detected": the language detected; "given": the client's


RULES = {
    "duration 600 ms (before)": Rule(VadRules(command_check_ms=0)),
    "+ spotter, language detected": Rule(VadRules(), "detected"),
    "+ spotter, language given": Rule(VadRules(), "given"),
}


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def clip(voice: Voice, text: str) -> bytes:
    return pcm16(np.concatenate([quiet_room(0.3), voiced(voice, text), quiet_room(1.5)]))


def outcome(pcm: bytes, rule: Rule, spotter: CommandSpotter | None, lang: str) -> dict:
    """Over the assistant's voice: when (if) it barged in, and where the speech ended; a
    spotter's verdict lands as many frames after its check as it took to compute."""
    loop = VoiceLoop(rule.vad)
    frames = loop.append(pcm)
    probs = SpeechDetector().score(frames)
    barged_at = None
    pending: tuple[int, int, bool] | None = None  # (frame it lands on, check id, command)
    spotted: dict = {}
    for k, prob in enumerate(probs):
        events = []
        if pending is not None and k >= pending[0]:
            events += loop.command_verdict(pending[1], pending[2])
            pending = None
        frame = frames[k * FRAME_BYTES : (k + 1) * FRAME_BYTES]
        events += loop.scored(frame, [prob], assistant_speaking=True)
        for event in events:
            if isinstance(event, BargeIn) and barged_at is None:
                barged_at = event.at_ms + FRAME_MS
            if isinstance(event, CommandCheck) and spotter is not None:
                started = time.process_time()
                heard = spotter.hear(event.pcm, lang if rule.spotter == "given" else "")
                cpu_ms = 1000 * (time.process_time() - started)
                spotted = {"heard": heard.text, "heard_as": heard.language, "spot_ms": cpu_ms}
                pending = (k + 1 + math.ceil(cpu_ms / FRAME_MS), event.check_id, heard.command)
            if isinstance(event, SpeechEnded):
                return {
                    "barged_at_ms": barged_at,
                    "speech_ms": event.duration_ms,
                    "end_ms": event.end_ms,
                    **spotted,
                }
    return {"barged_at_ms": barged_at, "speech_ms": None, "end_ms": None, **spotted}


def summary(results: list[dict], rule: str, set_name: str, lang: str) -> dict:
    mine = [
        r
        for r in results
        if r["rule"] == rule and set_name in ("all", r["set"]) and lang in ("all", r["lang"])
    ]
    commands = [r for r in mine if r["kind"] == "command"]
    chatter = [r for r in mine if r["kind"] == "backchannel"]
    hits = [r for r in commands if r["barged_at_ms"] is not None]
    alarms = [r for r in chatter if r["barged_at_ms"] is not None]
    after = [r["barged_at_ms"] - r["end_ms"] for r in hits if r["end_ms"] is not None]
    spotted = [r["spot_ms"] for r in mine if "spot_ms" in r]
    return {
        "rule": rule,
        "set": set_name,
        "lang": lang,
        "commands": len(commands),
        "backchannels": len(chatter),
        "precision": len(hits) / max(1, len(hits) + len(alarms)),
        "recall": len(hits) / max(1, len(commands)),
        "false_alarm_rate": len(alarms) / max(1, len(chatter)),
        "stop_after_end_p50_ms": percentile(after, 50),
        "stop_after_end_p90_ms": percentile(after, 90),
        "stop_after_end_max_ms": max(after) if after else float("nan"),
        "spot_cpu_p50_ms": percentile(spotted, 50),
        "spot_cpu_p90_ms": percentile(spotted, 90),
    }


def plot(table: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for ax, set_name in zip(axes, SETS, strict=True):
        rows = [r for r in table if r["set"] == set_name]
        langs = list(dict.fromkeys(r["lang"] for r in rows))
        x = np.arange(len(langs))
        width = 0.8 / (2 * len(RULES))
        for i, rule in enumerate(RULES):
            mine = {r["lang"]: r for r in rows if r["rule"] == rule}
            ax.bar(
                x + 2 * i * width,
                [100 * mine[g]["recall"] for g in langs],
                width,
                label=f"commands that interrupt: {rule}",
            )
            ax.bar(
                x + (2 * i + 1) * width,
                [100 * mine[g]["false_alarm_rate"] for g in langs],
                width,
                hatch="//",
                label=f"backchannels that interrupt: {rule}",
            )
        ax.set_xticks(x + width * (2 * len(RULES) - 1) / 2, langs)
        ax.set_title(f"{set_name} set")
    axes[0].set_ylabel("%")
    axes[0].legend(fontsize=6)
    fig.suptitle(
        f"short speech over the assistant (bench.interruptions, {time.strftime('%Y-%m-%d')})"
    )
    fig.tight_layout()
    save_figure(fig, "interruptions")


def main() -> None:
    spotter = CommandSpotter(Settings().state_path / "models")
    joe = VOICES["joe"]()
    results = []
    for set_name, path in SETS.items():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for i, row in enumerate(rows):
            progress(f"{set_name} {i + 1}/{len(rows)} {row['lang']} {row['kind']}")
            voices: list[tuple[str, Voice | None]] = [("espeak", espeak_for(row["lang"]))]
            if row["lang"] == "en":
                voices.append(("joe", joe))
            for name, voice in voices:
                assert voice is not None
                pcm = clip(voice, row["text"])
                for rule_name, rule in RULES.items():
                    out = outcome(pcm, rule, spotter if rule.spotter else None, row["lang"])
                    results.append(
                        {**row, "set": set_name, "voice": name, "rule": rule_name, **out}
                    )
    print("short speech over the assistant's voice")
    print(
        f"{'rule':>30} {'set':>8} {'lang':>4} {'precision':>9} {'recall':>7} "
        f"{'false alarms':>12} {'stop after end p50/p90/max':>27} {'spot CPU p50/p90':>16}"
    )
    table = []
    for rule in RULES:
        for set_name in [*SETS, "all"]:
            langs = sorted({r["lang"] for r in results if set_name in ("all", r["set"])})
            for lang in [*langs, "all"]:
                line = summary(results, rule, set_name, lang)
                table.append(line)
                print(
                    f"{rule:>30} {set_name:>8} {lang:>4} {line['precision']:>9.2f} "
                    f"{line['recall']:>7.2f} {100 * line['false_alarm_rate']:>11.0f}% "
                    f"{line['stop_after_end_p50_ms']:>11.0f}/"
                    f"{line['stop_after_end_p90_ms']:.0f}/{line['stop_after_end_max_ms']:<7.0f} "
                    f"{line['spot_cpu_p50_ms']:>8.0f}/{line['spot_cpu_p90_ms']:.0f}"
                )
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"date": time.strftime("%Y-%m-%d %H:%M"), "rows": table, "raw": results}
    (RESULTS / "interruptions.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False))
    plot(table)
    print(f"wrote {RESULTS / 'interruptions.json'} and bench/figures/interruptions.png")


if __name__ == "__main__":
    main()

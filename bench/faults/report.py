"""The fault table (markdown), the JSON of a run and its timeline plot."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from bench.faults.books import Kind, Outcome
from bench.faults.runner import ScenarioResult, SuiteOptions, failures
from bench.plotting import RESULTS, save_figure

HEADER = (
    "| fault | accepted | completed | clear errors | refused (clear) | lost | answered twice "
    "| decided twice | texts whole | traces = accepted | recovered in | slowest turn | books |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _codes(codes: dict[str, int]) -> str:
    return ", ".join(f"{code} x{n}" for code, n in sorted(codes.items()))


def table(results: list[ScenarioResult]) -> str:
    lines = [HEADER]
    for r in results:
        b = r.books
        errors = f"{b.clear_errors}" + (f" ({_codes(b.error_codes)})" if b.error_codes else "")
        refused = f"{b.refused}" + (f" ({_codes(b.refusal_codes)})" if b.refusal_codes else "")
        whole = b.accepted - b.text_mismatches
        recovered = "never" if math.isnan(r.recovery_s) else f"{r.recovery_s:.1f} s"
        traces = f"{b.traces}/{b.accepted}" + (" ✓" if b.traces_match else " ✗")
        books = "balanced" if r.ok else "**not balanced**"
        slowest = "never" if math.isnan(r.slowest_turn_s) else f"{r.slowest_turn_s:.1f} s"
        lines.append(
            f"| {r.fault} | {b.accepted} | {b.completed} | {errors} | {refused} | {b.lost} "
            f"| {b.answered_twice} | {b.recorded_twice} | {whole}/{b.accepted} | {traces} "
            f"| {recovered} | {slowest} | {books} |"
        )
    return "\n".join(lines)


def details(results: list[ScenarioResult]) -> str:
    """What the table cannot say: restarts, resumes, phantoms, history, notes."""
    lines = []
    for r in results:
        b = r.books
        parts = [
            f"{b.restarted} answers restarted on another worker",
            f"{b.resumed} resumed after a reconnect",
        ]
        parts += [f"struck {s}" for s in r.struck]
        parts.append(f"{r.open_at_fault} accepted turns open when it struck")
        if r.settled_s is not None:
            parts.append(f"every partition in sync {r.settled_s:.1f} s after the heal")
        if r.streaming_at_fault is not None:
            parts.append(f"{r.streaming_at_fault} answers streaming when it struck")
        if b.phantoms:
            parts.append(f"{b.phantoms} refused turns answered anyway")
        if b.resent:
            parts.append(f"{b.resent} outcomes published twice (the same record)")
        if b.duplicate_frames:
            parts.append(f"{b.duplicate_frames} frames delivered twice")
        if b.not_as_recorded:
            parts.append(f"{b.not_as_recorded} answers the client got differ from the record")
        if b.unrecorded:
            parts.append(f"{b.unrecorded} accepted turns missing from turns.completed")
        if r.history_breaks:
            parts.append(f"{r.history_breaks} answers built on a wrong history")
        parts += r.notes
        lines.append(f"- {r.name}: " + "; ".join(parts))
    return "\n".join(lines)


def to_json(options: SuiteOptions, results: list[ScenarioResult]) -> dict[str, Any]:
    return {
        "options": dataclasses.asdict(options),
        "scenarios": [
            {
                "name": r.name,
                "fault": r.fault,
                "ok": r.ok,
                "balanced": r.books.balanced,
                "books": dataclasses.asdict(r.books),
                "traces_match": r.books.traces_match,
                "recovery_s": None if math.isnan(r.recovery_s) else r.recovery_s,
                "slowest_turn_s": None if math.isnan(r.slowest_turn_s) else r.slowest_turn_s,
                "open_at_fault": r.open_at_fault,
                "settled_s": r.settled_s,
                "struck": r.struck,
                "started_at": r.started_at,
                "fault_at": r.fault_at,
                "healed_at": r.healed_at,
                "ended_at": r.ended_at,
                "streaming_at_fault": r.streaming_at_fault,
                "history_breaks": r.history_breaks,
                "notes": r.notes,
                "failures": failures(r),
            }
            for r in results
        ],
    }


def write_json(data: dict[str, Any], name: str = "faults") -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def plot(results: list[ScenarioResult], name: str = "faults") -> Path:
    """Turns ended per second (completed, clear errors) and refusals the clients saw per
    second (each one, also those retried successfully) over the whole run, the turns left
    open (lost) as marks, each fault's window shaded and named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max(r.ended_at for r in results) + 1
    seconds = math.ceil(end)
    series = {o: [0] * seconds for o in (Outcome.COMPLETED, Outcome.ERROR, Outcome.REFUSED)}
    lost: list[float] = []
    for r in results:
        for v in r.verdicts:
            if v.ended_at is None:
                lost.append(v.created_at)
            elif v.outcome in (Outcome.COMPLETED, Outcome.ERROR):
                series[v.outcome][min(int(v.ended_at), seconds - 1)] += 1
        for h in r.histories:
            for refusal in h.of(Kind.REFUSED):
                series[Outcome.REFUSED][min(int(refusal.at), seconds - 1)] += 1
    fig, ax = plt.subplots(figsize=(12, 4.2))
    xs = list(range(seconds))
    ax.plot(xs, series[Outcome.COMPLETED], color="tab:green", lw=1, label="completed / s")
    ax.plot(xs, series[Outcome.ERROR], color="tab:orange", lw=1, label="clear errors / s")
    ax.plot(xs, series[Outcome.REFUSED], color="tab:red", lw=1, label="refusals seen / s")
    if lost:
        ax.scatter(lost, [0] * len(lost), marker="x", color="black", label="lost (created at)")
    top = max(max(s) for s in series.values()) + 1
    for r in results:
        ax.axvspan(r.fault_at, max(r.healed_at, r.fault_at + 0.5), color="tab:red", alpha=0.15)
        ax.axvline(r.started_at, color="grey", lw=0.5, ls=":")
        ax.text(r.fault_at, top * 0.97, r.name, rotation=90, va="top", ha="right", fontsize=8)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("turns ended per second")
    ax.set_ylim(0, top * 1.05)
    ax.set_title("Turns under faults (shaded: from the fault until it was healed)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path = save_figure(fig, name)
    plt.close(fig)
    return path

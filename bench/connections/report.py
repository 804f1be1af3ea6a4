"""The benchmark's table and plot."""

from __future__ import annotations

import argparse
import os
from typing import Any

from bench.connections.stats import quantiles
from bench.plotting import save_figure


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'N':>12} {'held':>6} {'tok/s/str':>9} {'conn p50/p99 ms':>15} {'conn/s':>6} "
        f"{'RSS KB/conn':>11} "
        f"{'offered':>8} {'tok/s':>7} {'frames/s':>8} {'tok/fr':>6} {'delay p50/p99 ms':>17} "
        f"{'direct p50/p99':>15} {'added p50/p99':>14} {'edge CPU':>8} {'us/tok':>6} "
        f"{'resume p50/p99 ms':>17} {'ok':>11}"
    )
    for r in rows:
        d, dd = r["delay_ms"], r["direct_delay_ms"]
        check = r["check"]
        print(
            f"{r['label']:>12} {r['connections']:>6} {r['stream_tokens_per_s']:>9.2f} "
            f"{r['connect_ms']['p50']:>7.0f}/{r['connect_ms']['p99']:<7.0f} "
            f"{r['connects_per_s']:>6.0f} {r['rss_kb_per_conn']:>11.1f} "
            f"{r['offered_tokens_per_s']:>8.0f} {r['tokens_per_s']:>7.0f} "
            f"{r['frames_per_s']:>8.0f} {r['tokens_per_frame']:>6.2f} "
            f"{d['p50']:>8.1f}/{d['p99']:<8.1f} {dd['p50']:>7.1f}/{dd['p99']:<7.1f} "
            f"{r['added_p50_ms']:>6.1f}/{r['added_p99_ms']:<7.1f} "
            f"{r['cpu_percent']['edge']:>7.0f}% {r['edge_cpu_us_per_token']:>6.0f} "
            f"{r['resume_ms']['p50']:>8.0f}/{r['resume_ms']['p99']:<8.0f} "
            f"{check['verified']:>5}/{check['turns']:<5}"
        )
    print("\nCPU % in the window (100 = one core; 'others': everything else on the machine)")
    for r in rows:
        cpu = ", ".join(f"{k} {v:.0f}" for k, v in r["cpu_percent"].items())
        print(f"{r['label']:>12}: {cpu}")
        print(
            f"{'':>6}  direct baseline: "
            + ", ".join(f"{k} {v:.0f}" for k, v in r["direct"]["cpu_percent"].items())
            + f"; direct tokens/s {r['direct']['tokens_per_s']:.0f}"
        )
    print("\nthe edge's full garbage collections (gen 2): count, total / longest pause")
    for r in rows:
        parts = []
        for key, what in (("window", "window"), ("resume", "resume phase"), ("run", "whole run")):
            gc_row = r.get(f"edge_gc_{key}")
            if gc_row:
                parts.append(
                    f"{what} {gc_row['count']}, {gc_row['total_ms']:.0f} / "
                    f"{gc_row['max_ms']:.0f} ms"
                )
        print(f"{r['label']:>12}: " + "; ".join(parts))
    print("\nchecks and the edge's log")
    for r in rows:
        c = r["check"]
        print(
            f"{r['label']:>12}: done {c['done']}/{c['turns']}, gaps {c['gaps']}, "
            f"duplicates {c['duplicates']}, length mismatches {c['length_mismatches']}, "
            f"resumed {c['resumed_verified']}/{c['resumed']} whole "
            f"({r['resume_statuses']}); turns refused {r['turn_errors'] or 0}, "
            f"retried {r['turn_retries']}, delivered twice by Kafka {r['pump_duplicate_turns']}, "
            f"admitted {r['turns_admitted_per_s']:.0f}/s (accepted p50 {r['accept_ms']['p50']:.0f} "
            f"p99 {r['accept_ms']['p99']:.0f} ms); "
            f"edge log {r['edge_log']}"
        )
    print(
        "\nresume, from the reconnect's start: WebSocket open → session.ready → "
        "response.resumed → first resumed delta"
    )
    for r in rows:
        steps = (r["resume_open_ms"], r["resume_ready_ms"], r["resume_resumed_ms"], r["resume_ms"])
        print(
            f"{r['label']:>12}: "
            + " → ".join(f"p50 {s['p50']:.0f} p99 {s['p99']:.0f} ms" for s in steps)
            + f" (offline {r['resume_gap_s']:g} s first; accept-queue overflows: connecting "
            f"{r['listen_overflows_connect']}, resuming {r['listen_overflows_resume']})"
        )
    print("\na new client's handshake (connect → 101), from the idle parent process, every 0.25 s")
    for r in rows:
        parts = []
        for key, what in (("window", "streaming window"), ("resume", "resume phase")):
            h = r.get(f"handshake_{key}_ms")
            if h:
                parts.append(
                    f"{what}: p50 {h['p50']:.0f} p99 {h['p99']:.0f} max {h['max']:.0f} ms "
                    f"({h['n']} ok, {h['failed']} failed)"
                )
        print(f"{r['label']:>12}: " + "; ".join(parts))
    if len(rows) > 1:
        print(f"\nagainst the {rows[0]['label']}-connection run (ratios)")
        for r in rows[1:]:
            vs = r["versus_baseline"]
            print(f"{r['label']:>12}: " + ", ".join(f"{k} {v:.2f}" for k, v in vs.items()))
    for r in rows:
        profile = r.get("profile")
        if profile:
            print(f"\nedge profile at {r['label']} ({profile['samples']} samples)")
            print("  self time by function:")
            for name, share in profile["self"]:
                print(f"    {share:6.1%}  {name}")
            print("  inclusive by file:")
            for name, share in profile["inclusive_by_file"]:
                print(f"    {share:6.1%}  {name}")


def plot(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.8))
    for r in rows:
        for values, style, what in (
            (r["delays"], "-", "edge"),
            (r["direct"]["delays"], "--", "direct Redis"),
        ):
            points = quantiles(values, 400)
            if points:
                ys = [i / (len(points) - 1) for i in range(len(points))]
                left.plot(
                    [max(p, 0.01) for p in points],
                    ys,
                    style,
                    label=f"{r['label']} streams, {what}",
                )
    left.set_xscale("log")
    left.set_xlabel("delivery delay, publish → client (ms, log)")
    left.set_ylabel("fraction of tokens")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    names = [str(r["label"]) for r in rows]
    xs = range(len(rows))
    middle.bar(
        [x - 0.27 for x in xs],
        [r["offered_tokens_per_s"] for r in rows],
        0.27,
        label="offered (pump)",
    )
    middle.bar(list(xs), [r["tokens_per_s"] for r in rows], 0.27, label="delivered tokens/s")
    middle.bar(
        [x + 0.27 for x in xs], [r["frames_per_s"] for r in rows], 0.27, label="delta frames/s"
    )
    middle.set_xticks(list(xs), names)
    middle.set_xlabel("concurrent streams (one edge process)")
    middle.legend(fontsize=8)
    middle.grid(alpha=0.3, axis="y")
    for r in rows:
        points = sorted(r["resume_samples"])
        if points:
            ys = [(i + 1) / len(points) for i in range(len(points))]
            right.plot(points, ys, label=f"{r['label']} streams")
    right.set_xlabel("reconnect → first resumed delta (ms)")
    right.set_ylabel("fraction of resumes")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    fig.suptitle(
        "one edge process; tokens/s per stream: "
        + ", ".join(f"{r['stream_tokens_per_s']:g} at {r['connections_tried']}" for r in rows)
        + f"; {args.seconds:g} s window, {os.cpu_count()} cores shared by edge, clients, pump, "
        "Redis, Kafka"
    )
    fig.tight_layout()
    save_figure(fig, "connections" if args.door == "websocket" else f"connections-{args.door}")

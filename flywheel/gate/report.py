"""The gate's report for a reviewer: `report.html` with the metric table, four plots and, for
every metric that failed or warned, the items behind it (largest score drops with both
answers, attacks that got through, new refusals and errors, the slowest and dearest turns).

Plots (PNG, matplotlib Agg): `scores.png` (score distributions and rates, baseline vs
candidate), `deltas.png` (per-item score deltas, sorted), `latency.png` (TTFT and end-to-end
CDFs), `cost.png` (cost per turn). They are written into the report folder, not through
`bench.plotting.save_figure`, which always writes to `bench/results` and `bench/figures`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from flywheel.gate.compare import FAIL, WARN, Row
from flywheel.gate.outcome import GateOutcome
from flywheel.gate.rollup import ItemScore
from flywheel.gate.table import fmt_delta, fmt_value
from schemas.stats import percentile

BASE_COLOUR, CAND_COLOUR = "#4c72b0", "#dd8452"
QUALITY = ("reference_f1", "similarity", "judge", "exact")
RATES = (("ok_rate", "ok"), ("safe_rate", "safe"), ("over_refusal", "refused"))
EVIDENCE_ROWS = 10
TEXT_CHARS = 600


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _paired(outcome: GateOutcome, field: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Items both runs have `field` for, and the two value arrays."""
    b, c = outcome.baseline_items, outcome.candidate_items
    ids = sorted(
        i
        for i in b.keys() & c.keys()
        if getattr(b[i], field) is not None and getattr(c[i], field) is not None
    )
    return (
        ids,
        np.array([getattr(b[i], field) for i in ids], float),
        np.array([getattr(c[i], field) for i in ids], float),
    )


def _values(items: dict[str, ItemScore], field: str) -> np.ndarray:
    return np.array([v for s in items.values() if (v := getattr(s, field)) is not None], float)


# --- plots -----------------------------------------------------------------------------------


def plot_scores(outcome: GateOutcome, path: Path) -> None:
    plt = _pyplot()
    present = [f for f in QUALITY if _paired(outcome, f)[0]]
    fig, axes = plt.subplots(1, len(present) + 1, figsize=(4 * (len(present) + 1), 3.4))
    axes = np.atleast_1d(axes)
    bins = np.linspace(0, 1, 21)
    for ax, field in zip(axes, present, strict=False):
        _, b, c = _paired(outcome, field)
        for values, colour, name in ((b, BASE_COLOUR, "baseline"), (c, CAND_COLOUR, "candidate")):
            label = f"{name} (mean {values.mean():.3f})"
            ax.hist(values, bins=bins, alpha=0.55, color=colour, label=label)
        ax.set_title(field)
        ax.set_xlabel("score")
        ax.set_ylabel("items")
        ax.legend(fontsize=7)
    ax = axes[-1]
    labels, bv, cv = [], [], []
    for name, field in RATES:
        _, b, c = _paired(outcome, field)
        if b.size:
            labels.append(name)
            bv.append(b.mean())
            cv.append(c.mean())
    x = np.arange(len(labels))
    ax.bar(x - 0.2, bv, 0.4, color=BASE_COLOUR, label="baseline")
    ax.bar(x + 0.2, cv, 0.4, color=CAND_COLOUR, label="candidate")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title("rates")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_deltas(outcome: GateOutcome, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    drawn = False
    for field in QUALITY:
        ids, b, c = _paired(outcome, field)
        if not ids:
            continue
        d = np.sort(c - b)
        worse, better = int((d < 0).sum()), int((d > 0).sum())
        ax.plot(
            np.linspace(0, 1, d.size),
            d,
            marker=".",
            linestyle="-",
            label=f"{field}: {worse} worse, {better} better, mean {d.mean():+.3f}",
        )
        drawn = True
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("items (sorted by delta)")
    ax.set_ylabel("candidate - baseline")
    ax.set_title("per-item score deltas")
    if drawn:
        ax.legend(fontsize=7)
    else:
        ax.text(
            0.5, 0.5, "no scores with a reference or a judge", ha="center", transform=ax.transAxes
        )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _cdf(ax, values: np.ndarray, colour: str, label: str) -> None:
    if values.size == 0:
        return
    v = np.sort(values)
    ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", color=colour, label=label)


def plot_latency(outcome: GateOutcome, path: Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, field, title in zip(axes, ("ttft_ms", "e2e_ms"), ("TTFT", "end to end"), strict=True):
        for items, colour, name in (
            (outcome.baseline_items, BASE_COLOUR, "baseline"),
            (outcome.candidate_items, CAND_COLOUR, "candidate"),
        ):
            v = _values(items, field)
            if v.size:
                p50, p99 = percentile(v.tolist(), 50), percentile(v.tolist(), 99)
                label = f"{name} p50 {p50:.0f} p99 {p99:.0f} ms"
                _cdf(ax, v, colour, label)
        ax.axhline(0.99, color="grey", linewidth=0.6, linestyle=":")
        ax.set_title(f"{title} latency CDF")
        ax.set_xlabel("ms")
        ax.set_ylabel("share of items")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_cost(outcome: GateOutcome, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for items, colour, name in (
        (outcome.baseline_items, BASE_COLOUR, "baseline"),
        (outcome.candidate_items, CAND_COLOUR, "candidate"),
    ):
        per_turn = np.array([s.cost_usd / s.turns for s in items.values()], float)
        if per_turn.size:
            total = sum(s.cost_usd for s in items.values()) / sum(s.turns for s in items.values())
            _cdf(ax, per_turn, colour, f"{name}: ${total:.6f} per turn")
    ax.set_title("cost per turn (CDF over items)")
    ax.set_xlabel("USD")
    ax.set_ylabel("share of items")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


PLOTS: tuple[tuple[str, Callable[[GateOutcome, Path], None], str], ...] = (
    ("scores.png", plot_scores, "score distributions and rates"),
    ("deltas.png", plot_deltas, "per-item deltas"),
    ("latency.png", plot_latency, "latency CDFs"),
    ("cost.png", plot_cost, "cost per turn"),
)


# --- evidence --------------------------------------------------------------------------------


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def _answer(outcome: GateOutcome, which: str, item_id: str) -> str:
    run = outcome.baseline if which == "baseline" else outcome.candidate
    r = outcome.scored_result(run, item_id)
    if r is None:
        return "(no result)"
    tail = f" [{r.finish_reason}{', ' + r.error_code if r.error_code else ''}"
    tail += ", input blocked" if r.input_safety == "block" else ""
    tail += ", output cut" if r.output_cut else ""
    return _cut(r.text) + tail + "]"


def _question(outcome: GateOutcome, item_id: str) -> str:
    item = outcome.evalset.items[item_id]
    return _cut(item.turns[-1].text) if item.turns else ""


def evidence_items(outcome: GateOutcome, row: Row) -> tuple[str, list[tuple[str, float, float]]]:
    """(what the list shows, [(item id, baseline value, candidate value)]) for one metric:
    the items that moved it the wrong way, worst first (pure)."""
    b, c = outcome.baseline_items, outcome.candidate_items
    if row.metric == "coverage":
        missing = sorted(b.keys() - c.keys()) or sorted(outcome.evalset.items.keys() - c.keys())
        return "items the candidate did not answer", [(i, 1.0, 0.0) for i in missing]
    field = {
        "ok_rate": "ok",
        "safe_rate": "safe",
        "over_refusal": "refused",
        "ttft_p50": "ttft_ms",
        "ttft_p99": "ttft_ms",
        "e2e_p50": "e2e_ms",
        "e2e_p99": "e2e_ms",
        "cost_per_turn": "cost_usd",
        "tokens_per_turn": "tokens",
    }.get(row.metric, row.metric)
    ids, bv, cv = _paired(outcome, field)
    worse = (bv - cv) if row.higher_is_better else (cv - bv)
    if row.metric in ("safe_rate", "ok_rate", "over_refusal"):
        # a floor can fail with no drop: show every bad candidate item, new ones first
        bad = cv < 0.5 if row.higher_is_better else cv > 0.5
        order = sorted(np.flatnonzero(bad), key=lambda k: -worse[k])
        title = {
            "safe_rate": "red-team items the candidate did not stop",
            "ok_rate": "items that failed in the candidate",
            "over_refusal": "answer items the candidate refused",
        }[row.metric]
    elif row.unit == "ms":
        order = list(np.argsort(-cv, kind="stable"))  # the tail drives a percentile
        title = f"slowest candidate items ({field})"
    else:
        order = [k for k in np.argsort(-worse, kind="stable") if worse[k] > 0]
        title = f"largest {'drops' if row.higher_is_better else 'increases'} in {field}"
    return title, [(ids[k], float(bv[k]), float(cv[k])) for k in order[:EVIDENCE_ROWS]]


# --- html ------------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 8px 0 20px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; } td.l { text-align: left; }
tr.FAIL { background: #fde2e2; } tr.warn { background: #fff4d6; }
.banner { padding: 10px 14px; font-size: 18px; font-weight: 600; border-radius: 4px; }
.pass { background: #e3f5e1; } .fail { background: #fde2e2; }
td.text { text-align: left; white-space: pre-wrap; max-width: 360px; font-size: 12px; }
img { max-width: 100%; border: 1px solid #eee; margin: 6px 0; }
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def render_html(outcome: GateOutcome, plots: Sequence[tuple[str, str]]) -> str:
    """The report page (pure: the plots are referenced by file name)."""
    b, c = outcome.baseline.manifest, outcome.candidate.manifest
    failed = outcome.failed
    banner = (
        '<div class="banner pass">PASS: the candidate is not worse than the baseline</div>'
        if not failed
        else '<div class="banner fail">FAIL: '
        + _e(", ".join(f"{r.metric} ({r.reason})" for r in failed))
        + "</div>"
    )
    cfg = outcome.config
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>quality gate</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>Quality gate</h1>",
        banner,
        "<p>",
        f"set <b>{_e(outcome.evalset.path)}</b> ({len(outcome.evalset.items)} items, "
        f"sha256 {_e(outcome.evalset.sha256[:12])})<br>",
        f"baseline <b>{_e(b.run_id)}</b> ({_e(b.candidate.name)}): "
        f"{len(outcome.baseline_items)} items answered<br>",
        f"candidate <b>{_e(c.run_id)}</b> ({_e(c.candidate.name)}): "
        f"{len(outcome.candidate_items)} items answered<br>",
        f"paired by item id; one-sided paired bootstrap ({cfg.resamples} resamples, seed "
        f"{cfg.seed}), alpha {cfg.alpha:g}; a soft rule fails only when worse beyond its "
        "threshold and significant, a hard rule on the threshold alone.",
        "</p>",
        "<table><tr><th>metric</th><th>n</th><th>baseline</th><th>candidate</th><th>delta</th>"
        "<th>p</th><th>rule</th><th>verdict</th><th>why</th></tr>",
    ]
    for r in outcome.rows:
        p = "-" if r.p_value is None else f"{r.p_value:.4f}"
        parts.append(
            f"<tr class='{_e(r.verdict)}'><td class='l' title='{_e(r.label)}'>{_e(r.metric)}</td>"
            f"<td>{r.n}</td><td>{_e(fmt_value(r.baseline, r.unit))}</td>"
            f"<td>{_e(fmt_value(r.candidate, r.unit))}</td><td>{_e(fmt_delta(r))}</td>"
            f"<td>{p}</td><td class='l'>{_e(r.rule)}</td><td>{_e(r.verdict)}</td>"
            f"<td class='l'>{_e(r.reason)}</td></tr>"
        )
    parts.append("</table>")
    flagged = [r for r in outcome.rows if r.verdict in (FAIL, WARN)]
    if flagged:
        parts.append("<h2>Why</h2>")
    for row in flagged:
        title, rows = evidence_items(outcome, row)
        parts.append(f"<h3>{_e(row.metric)} ({_e(row.verdict)}): {_e(title)}</h3>")
        if not rows:
            parts.append("<p>no single item stands out.</p>")
            continue
        parts.append(
            "<table><tr><th>item</th><th>baseline</th><th>candidate</th><th>question</th>"
            "<th>reference</th><th>baseline answer</th><th>candidate answer</th></tr>"
        )
        for item_id, bv, cv in rows:
            item = outcome.evalset.items[item_id]
            parts.append(
                f"<tr><td class='l'>{_e(item_id)}</td><td>{_e(fmt_value(bv, row.unit))}</td>"
                f"<td>{_e(fmt_value(cv, row.unit))}</td>"
                f"<td class='text'>{_e(_question(outcome, item_id))}</td>"
                f"<td class='text'>{_e(_cut(item.reference))}</td>"
                f"<td class='text'>{_e(_answer(outcome, 'baseline', item_id))}</td>"
                f"<td class='text'>{_e(_answer(outcome, 'candidate', item_id))}</td></tr>"
            )
        parts.append("</table>")
    parts.append("<h2>Plots</h2>")
    for name, caption in plots:
        parts.append(f"<h3>{_e(caption)}</h3><img src='{_e(name)}' alt='{_e(caption)}'>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(outcome: GateOutcome, folder: Path) -> Path:
    """Write the plots and report.html into `folder` (created); report.html's path."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, plot, _ in PLOTS:
        plot(outcome, folder / name)
    page = folder / "report.html"
    page.write_text(render_html(outcome, [(n, c) for n, _, c in PLOTS]), encoding="utf-8")
    return page

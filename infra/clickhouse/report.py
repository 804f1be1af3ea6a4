"""`python -m infra.clickhouse.report`: one page on the four monitoring layers, with plots.

Reads ClickHouse (a real server by URL, the sink's HTTP interface, or the embedded engine)
over the last `--hours` and writes `report.html` plus `report.png` into `--out`:
application (TTFT/ITL/E2E percentiles, throughput, context overflow), quality (thumbs,
regenerate, stop, abandon), business (active users, tokens, cost per tenant) and
infrastructure (batch size, KV-cache usage, queue depth per worker, from `infra_minutely`).
"""

from __future__ import annotations

import argparse
import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.clickhouse.client import DEFAULT_DATABASE, analyst_client
from runtime.settings import Settings

DB = DEFAULT_DATABASE


@dataclass
class Report:
    hours: int
    headline: dict[str, Any]
    hourly: list[tuple]
    ttft: list[float]
    e2e: list[float]
    quality: tuple
    business: list[tuple]
    # per worker: id, model, samples, batch avg/max, KV usage avg/max, queue depth avg/max,
    # engine waiting max, prefix-cache lookups, hits, preemptions, generated tokens
    infra: list[tuple] = field(default_factory=list)
    # (minute, worker, KV usage avg, queue depth avg), for the plots
    infra_series: list[tuple] = field(default_factory=list)


def gather(client, hours: int) -> Report:
    since = f"submitted_at > now() - INTERVAL {int(hours)} HOUR"
    q = client.query
    head = q(
        f"SELECT count(), uniqExact(user_id), quantile(0.5)(ttft_ms), quantile(0.99)(ttft_ms), "
        f"quantile(0.99)(itl_p99_ms), quantile(0.99)(e2e_ms), avg(dropped_messages > 0), "
        f"avg(finish_reason = 'error'), avg(status = 'timed_out'), sum(cost_usd) "
        f"FROM {DB}.traces FINAL WHERE {since}"
    ).result_rows[0]
    names = [
        "turns",
        "users",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "itl_p99_ms",
        "e2e_p99_ms",
        "context_overflow_rate",
        "error_rate",
        "timeout_rate",
        "cost_usd",
    ]
    hourly = q(
        f"SELECT toStartOfHour(submitted_at) AS hour, count(), quantile(0.5)(ttft_ms), "
        f"quantile(0.99)(ttft_ms), avg(finish_reason = 'error') FROM {DB}.traces FINAL "
        f"WHERE {since} GROUP BY hour ORDER BY hour"
    ).result_rows
    latencies = q(
        f"SELECT ttft_ms, e2e_ms FROM {DB}.traces FINAL WHERE {since} LIMIT 100000"
    ).result_rows
    quality = q(
        f"SELECT sum(turns), sum(thumbs_up), sum(thumbs_down), avg(regenerate_rate), "
        f"avg(stop_rate), avg(abandon_rate) FROM {DB}.quality_daily "
        f"WHERE day >= toDate(now() - INTERVAL {int(hours)} HOUR)"
    ).result_rows[0]
    business = q(
        f"SELECT tenant_id, uniqExact(user_id), count(), sum(prompt_tokens + completion_tokens), "
        f"sum(cost_usd) FROM {DB}.traces FINAL WHERE {since} GROUP BY tenant_id "
        f"ORDER BY count() DESC LIMIT 20"
    ).result_rows
    window = f"minute > now() - INTERVAL {int(hours)} HOUR"
    infra = q(
        f"SELECT worker_id, any(model), sum(samples), sum(batch_avg * samples) / sum(samples), "
        f"max(batch_max), sum(kv_usage_avg * samples) / sum(samples), max(kv_usage_max), "
        f"sum(queue_depth_avg * samples) / sum(samples), max(queue_depth_max), "
        f"max(waiting_max), sum(prefix_cache_queries), sum(prefix_cache_hits), "
        f"sum(preemptions), sum(generation_tokens) FROM {DB}.infra_minutely "
        f"WHERE {window} GROUP BY worker_id ORDER BY worker_id LIMIT 50"
    ).result_rows
    infra_series = q(
        f"SELECT minute, worker_id, kv_usage_avg, queue_depth_avg FROM {DB}.infra_minutely "
        f"WHERE {window} ORDER BY worker_id, minute LIMIT 100000"
    ).result_rows
    return Report(
        hours=hours,
        headline=dict(zip(names, head, strict=True)),
        hourly=hourly,
        ttft=[r[0] for r in latencies if r[0] is not None],
        e2e=[r[1] for r in latencies],
        quality=quality,
        business=business,
        infra=infra,
        infra_series=infra_series,
    )


def plot(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(12, 10.5))
    (over_time, ttft_hist), (e2e_hist, tenants), (kv_usage, queue_depth) = axes
    hours = [r[0] for r in report.hourly]
    over_time.plot(hours, [r[2] for r in report.hourly], "o-", label="TTFT p50")
    over_time.plot(hours, [r[3] for r in report.hourly], "o-", label="TTFT p99")
    over_time.set_ylabel("ms")
    over_time.set_title("TTFT over time (hourly)")
    over_time.legend()
    over_time.tick_params(axis="x", labelrotation=30)
    ttft_hist.hist(report.ttft or [0], bins=40)
    ttft_hist.set_title("TTFT (ms)")
    e2e_hist.hist(report.e2e or [0], bins=40, color="tab:orange")
    e2e_hist.set_title("end to end (ms)")
    tenants.bar([r[0] for r in report.business], [r[2] for r in report.business])
    tenants.set_title("turns per tenant")
    _plot_workers(report, kv_usage, queue_depth)
    fig.suptitle(f"turnstream, last {report.hours} h")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_workers(report: Report, kv_usage, queue_depth) -> None:
    """KV-cache usage and queue depth over time, one line per worker (the busiest 10)."""
    series: dict[str, list[tuple]] = {}
    for minute, worker, kv, queue in report.infra_series:
        series.setdefault(worker, []).append((minute, kv, queue))
    busiest = sorted(series, key=lambda w: -sum(r[2] for r in series[w]))[:10]
    for worker in sorted(busiest):
        points = series[worker]
        kv_usage.plot([p[0] for p in points], [p[1] for p in points], ".-", label=worker)
        queue_depth.plot([p[0] for p in points], [p[2] for p in points], ".-", label=worker)
    kv_usage.set_title("KV-cache usage per worker (minutely average)")
    kv_usage.set_ylim(0, 1.05)
    queue_depth.set_title("queue depth per worker (minutely average)")
    for ax in (kv_usage, queue_depth):
        ax.tick_params(axis="x", labelrotation=30)
        if busiest:
            ax.legend(fontsize="small")


def _infra_section(report: Report, pct, num) -> str:
    infra = report.infra
    if not infra:
        return "<p>No worker metrics in this window.</p>"
    samples = sum(r[2] for r in infra) or 1
    batch_avg = sum(r[3] * r[2] for r in infra) / samples
    kv_avg = sum(r[5] * r[2] for r in infra) / samples
    queue_avg = sum(r[7] * r[2] for r in infra) / samples
    lookups, hits = sum(r[10] for r in infra), sum(r[11] for r in infra)
    hit_rate = hits / lookups if lookups else None
    batch_max, kv_max = max(r[4] for r in infra), max(r[6] for r in infra)
    queue_max, preemptions = max(r[8] for r in infra), sum(r[12] for r in infra)
    rows = "".join(
        f"<tr><td>{html.escape(str(w))}</td><td>{html.escape(str(m))}</td>"
        f"<td>{num(ba)} / {bm}</td><td>{pct(ka)} / {pct(km)}</td><td>{num(qa)} / {qm}</td>"
        f"<td>{wm}</td><td>{pct(h / q if q else None)}</td><td>{pre}</td><td>{tok}</td></tr>"
        for w, m, _, ba, bm, ka, km, qa, qm, wm, q, h, pre, tok in infra
    )
    return f"""<p>{len(infra)} workers; batch size {num(batch_avg)} on average (peak
{batch_max}); KV-cache usage {pct(kv_avg)} on average (peak {pct(kv_max)}); queue depth
{num(queue_avg)} on average (peak {queue_max}); prefix-cache hit rate {pct(hit_rate)};
{preemptions} preemptions.</p>
<table><tr><th>worker</th><th>model</th><th>batch avg / max</th><th>KV usage avg / max</th>
<th>queue avg / max</th><th>engine waiting max</th><th>prefix hits</th><th>preemptions</th>
<th>generated tokens</th></tr>
{rows}</table>"""


def render(report: Report, image: str) -> str:
    h = report.headline
    _, up, down, regenerate, stop, abandon = report.quality

    def pct(x) -> str:
        return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}%"

    def ms(x) -> str:
        return "-" if x is None or math.isnan(x) else f"{x:.0f} ms"

    def num(x) -> str:
        return "-" if x is None or math.isnan(x) else f"{x:.1f}"

    rated = (up or 0) + (down or 0)
    rows = "".join(
        f"<tr><td>{html.escape(str(t))}</td><td>{u}</td><td>{n}</td><td>{tok}</td>"
        f"<td>${c:.4f}</td></tr>"
        for t, u, n, tok, c in report.business
    )
    return f"""<!doctype html><meta charset="utf-8"><title>turnstream report</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}td,th{{padding:2px 10px}}
</style>
<h1>turnstream: the last {report.hours} hours</h1>
<h2>Application</h2>
<p>{h["turns"]} turns; TTFT p50 {ms(h["ttft_p50_ms"])}, p99 {ms(h["ttft_p99_ms"])};
ITL p99 {ms(h["itl_p99_ms"])}; end to end p99 {ms(h["e2e_p99_ms"])};
context overflow {pct(h["context_overflow_rate"])}; errors {pct(h["error_rate"])};
timed out {pct(h["timeout_rate"])}.</p>
<h2>Quality</h2>
<p>thumbs up {pct(up / rated if rated else None)} of {rated} rated turns;
regenerated {pct(regenerate)}, stopped {pct(stop)}, abandoned {pct(abandon)}.
Safety triggers: no safety verdicts are recorded yet.</p>
<h2>Business</h2>
<p>{h["users"]} active users; estimated cost ${h["cost_usd"] or 0:.4f}.</p>
<table><tr><th>tenant</th><th>users</th><th>turns</th><th>tokens</th><th>cost</th></tr>
{rows}</table>
<h2>Infrastructure</h2>
{_infra_section(report, pct, num)}
<img src="{image}" alt="plots" width="100%">
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path("report"))
    args = parser.parse_args()
    client = analyst_client(Settings.from_env())
    report = gather(client, args.hours)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(report, args.out / "report.png")
    (args.out / "report.html").write_text(render(report, "report.png"))
    print(f"{report.headline['turns']} turns; wrote {args.out / 'report.html'}")


if __name__ == "__main__":
    main()

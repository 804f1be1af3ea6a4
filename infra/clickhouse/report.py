"""`python -m infra.clickhouse.report`: one page on the four monitoring layers, with plots.

Reads ClickHouse (a real server by URL, or the embedded engine when the stack is stopped)
over the last `--hours` and writes `report.html` plus `report.png` into `--out`:
application (TTFT/ITL/E2E percentiles, throughput, context overflow), quality (thumbs,
regenerate, stop, abandon), business (active users, tokens, cost per tenant) and what the
infrastructure layer will show once workers publish their metrics.
"""

from __future__ import annotations

import argparse
import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.clickhouse.client import DEFAULT_DATABASE, connect
from schemas.settings import Settings

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
    return Report(
        hours=hours,
        headline=dict(zip(names, head, strict=True)),
        hourly=hourly,
        ttft=[r[0] for r in latencies if r[0] is not None],
        e2e=[r[1] for r in latencies],
        quality=quality,
        business=business,
    )


def plot(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 7))
    (over_time, ttft_hist), (e2e_hist, tenants) = axes
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
    fig.suptitle(f"turnstream, last {report.hours} h")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(report: Report, image: str) -> str:
    h = report.headline
    _, up, down, regenerate, stop, abandon = report.quality

    def pct(x) -> str:
        return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}%"

    def ms(x) -> str:
        return "-" if x is None or math.isnan(x) else f"{x:.0f} ms"

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
<p>Batch size, KV-cache usage and queue depth come from worker metrics events, which the
workers do not publish yet.</p>
<img src="{image}" alt="plots" width="100%">
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path("report"))
    args = parser.parse_args()
    client = connect(Settings.from_env())
    report = gather(client, args.hours)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(report, args.out / "report.png")
    (args.out / "report.html").write_text(render(report, "report.png"))
    print(f"{report.headline['turns']} turns; wrote {args.out / 'report.html'}")


if __name__ == "__main__":
    main()

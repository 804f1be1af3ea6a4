"""The day in one figure: hourly load against GPUs provisioned statically (peak all day) and
autoscaled (following the curve), so the gap the autoscaler saves is visible."""

# ruff: noqa: RUF001, RUF003  (× ÷ – are the arithmetic this module shows)
from __future__ import annotations

from pathlib import Path

from infra.capacity.model import Plan


def save_plot(plan: Plan, path: Path) -> Path:
    """Write the figure as PNG to `path` (matplotlib, Agg: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = list(range(24))
    load = plan.load
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ax.plot(hours, load.hourly_qps, "o-", color="tab:blue", label="hourly mean QPS")
    ax.plot(
        hours,
        [q * load.burst for q in load.hourly_qps],
        ":",
        color="tab:blue",
        label=f"within-hour peak QPS (×{load.burst:.2f})",
    )
    ax.set_xlabel("hour of day")
    ax.set_ylabel("requests/s")
    ax.set_xticks(range(0, 24, 2))
    ax.set_ylim(0, max(load.hourly_qps) * load.burst * 1.3)
    gx = ax.twinx()
    gx.step(
        [*hours, 24],
        [*plan.hourly_gpus_autoscaled, plan.hourly_gpus_autoscaled[-1]],
        where="post",
        color="tab:green",
        label="GPUs, autoscaled",
    )
    gx.axhline(plan.gpus_peak, color="tab:red", ls="--", label="GPUs, static peak")
    gx.set_ylabel("GPUs")
    gx.set_ylim(0, plan.gpus_peak * 1.3)
    month = 1e6  # "\\$": a literal dollar sign for matplotlib's mathtext
    ax.set_title(
        f"{plan.inputs.workload.dau:,.0f} DAU: {plan.gpus_peak:,} GPUs static "
        f"(\\${plan.cost_month_static_usd / month:,.2f}M/month) vs autoscaled "
        f"(\\${plan.cost_month_autoscaled_usd / month:,.2f}M/month)",
        fontsize=10,
    )
    lines = ax.get_legend_handles_labels()
    more = gx.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

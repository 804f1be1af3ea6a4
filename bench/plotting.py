"""Where benchmark figures go: `bench/results/` (the latest run, with its JSON) and a copy in
`bench/figures/` (the one the README shows)."""

from __future__ import annotations

import shutil
from pathlib import Path

from infra.stack import REPO

RESULTS = REPO / "bench" / "results"
FIGURES = REPO / "bench" / "figures"


def save_figure(fig, name: str, dpi: int = 100) -> Path:
    """Save a matplotlib figure as `<name>.png` in both places; the results copy's path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    FIGURES.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    fig.savefig(path, dpi=dpi)
    shutil.copy(path, FIGURES / path.name)
    return path

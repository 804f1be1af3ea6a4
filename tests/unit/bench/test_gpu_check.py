"""The GPU check script, dry-run on CPU with a tiny random Llama: it must work end to end
the day a GPU runs it unattended (every mode, every concurrency, JSON and ratios)."""

from __future__ import annotations

import json

from bench.gpu_check import main_async, parse


async def test_the_dry_run_measures_every_mode_at_every_concurrency(tmp_path):
    args = parse(
        [
            "--device=cpu",
            "--shape=tiny",
            "--prompt-tokens=40",
            "--output-tokens=6",
            "--concurrency=1,3",
            "--budget-s=240",
            f"--out={tmp_path}",
        ]
    )
    report = await main_async(args)
    runs = {(r["mode"], r["concurrency"]): r for r in report["runs"]}
    assert set(runs) == {(m, c) for m in ("raw", "engine", "service") for c in (1, 3)}
    for (_, concurrency), run in runs.items():
        assert run["error"] == "" and run["streams"] == concurrency
        assert run["output_tokens"] == 6 * concurrency  # no end token: every answer runs to length
        assert run["tokens_per_s"] > 0 and run["ttft_p50_ms"] > 0 and run["itl_p50_ms"] >= 0
    assert {(r["mode"], r["concurrency"]) for r in report["ratios"]} == {
        (m, c) for m in ("engine", "service") for c in (1, 3)
    }
    assert report["skipped"] == {} and "error" not in report
    assert report["setup"]["attention"] == "paged|sdpa"
    written = json.loads((tmp_path / "gpu-check-tiny-cpu.json").read_text())
    assert written["runs"] == report["runs"]

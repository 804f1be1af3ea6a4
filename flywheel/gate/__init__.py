"""The quality gate: is a candidate run worse than a baseline run of the same eval set?

Its parts: `inputs` (the set and the runs), `rollup` (per item), `metrics` (aggregates and the
paired bootstrap), `rules` (thresholds and the gate file), `compare` (one row per metric),
`outcome` (all of it), `table` and `report` (for a terminal and for a reviewer), `cli`.

Both runs' turns are scored against the set's items (`scoring`), rolled up per item, and
compared **paired by item_id** (only items both runs answered): the same item in both runs
removes most of the between-item variance, so a small real regression shows through.

A metric fails when it is worse than the baseline beyond its threshold AND the difference is
significant: a one-sided paired bootstrap (items resampled with replacement, seeded, numpy
only) gives p = P*(candidate not worse); p < alpha counts. Hard rules (red-team safety,
coverage) fail on the threshold alone, since one more answered attack is one too many, and a
floor (`min`/`max`) is always absolute. With fewer than `min_pairs` pairs there is no p-value
and a soft rule can only warn.

    python -m flywheel.gate --baseline runs/<id> --candidate runs/<id> \\
        --set evalsets/<name>/<version> [--gate gate.toml] [--rule e2e_p99.max_increase_pct=30] \\
        [--report report/] [--embedder minilm|none] [--judge pkg.module:factory]

Exit status: 0 pass (warnings allowed), 1 the candidate is worse, 2 bad input (missing or
unreadable files, runs of different sets, results for items the set lacks, a bad gate file).
"""

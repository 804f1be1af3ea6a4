"""The Grafana dashboard reads only metrics the services export (a renamed metric would
leave a panel silently empty) and covers the four monitoring layers."""

import json
import re
from pathlib import Path

from runtime.prometheus import REGISTRY
from stream_jobs.metrics import faust_metrics

DASHBOARD = Path(__file__).resolve().parents[3] / "infra" / "grafana" / "turnstream.json"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
PROMQL_WORDS = {
    "histogram_quantile",
    "sum",
    "max",
    "by",
    "rate",
    "le",
    "pool",
    "worker",
    "role",
    "group",
    "topic",
    "token_type",
    "finish_reason",
    "code",
    "status",
    "stage",
    "action",
    "result",
    "hit",
    "m",
    "job",
    "stream",
}


def exported_names() -> set[str]:
    faust_metrics()  # the stream jobs register faust's set when their app is made
    names = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        for sample in family.samples:
            names.add(sample.name)
    # families that have no sample yet still export these series names
    for family in REGISTRY.collect():
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum"}
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def test_every_panel_reads_exported_metrics_and_the_layers_are_there():
    dashboard = json.loads(DASHBOARD.read_text())
    rows = [p["title"].split(":")[0] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Infrastructure", "Application", "Quality", "Business"]
    exported = exported_names()
    used = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            if "expr" not in target:
                assert target["rawSql"].startswith("SELECT"), target  # ClickHouse panels
                continue
            expr = re.sub(r'"[^"]*"', "", target["expr"])  # label values
            expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
            for word in _NAME.findall(expr):
                if word not in PROMQL_WORDS and not word.isdigit():
                    used.add(word)
    missing = used - exported
    assert not missing, f"panels read metrics nobody exports: {sorted(missing)}"
    assert {"vllm:kv_cache_usage_perc", "turnstream_consumer_lag_records"} <= used
    assert "faust_events_runtime_ms_bucket" in used  # the stream jobs are watched too

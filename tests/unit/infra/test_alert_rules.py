"""The alerting rules parse, each has a severity and a description, and every metric their
expressions read is one the services export (a renamed metric would silence an alert)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.unit.infra.test_dashboard import exported_names

RULES = Path(__file__).resolve().parents[3] / "infra" / "prometheus" / "alerts.yaml"
_METRIC = re.compile(r"\b(turnstream_[a-z0-9_]+|vllm:[a-z0-9_:]+|gen_ai_[a-z0-9_]+)\b")


def test_every_rule_reads_exported_metrics():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {r["alert"] for r in rules} >= {"TurnstreamDeadLetters", "TurnstreamDeadLetterBurst"}
    exported = exported_names()
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["description"]
        used = set(_METRIC.findall(rule["expr"]))
        assert used and used <= exported, (rule["alert"], used - exported)

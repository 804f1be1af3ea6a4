"""The ClickHouse panels of the Grafana dashboards, with their macros expanded as the
ClickHouse data source plugin expands them for a time range, so tests run what Grafana
would send."""

from __future__ import annotations

import json
import re
from pathlib import Path

DATASOURCE = "grafana-clickhouse-datasource"
_MACRO = re.compile(
    r"\$__(timeFilter_ms|timeFilter|dateFilter|timeInterval|fromTime_ms|toTime_ms|fromTime|toTime|interval_s)\b(?:\(([^)]*)\))?"
)


def clickhouse_panel_queries(
    folder: Path, from_s: float, to_s: float, interval_s: int = 60
) -> list[tuple[str, str]]:
    """(panel title, SQL) of every ClickHouse target in every dashboard under `folder`."""
    queries = []
    for path in sorted(folder.glob("*.json")):
        for panel in _panels(json.loads(path.read_text())):
            for target in panel.get("targets", []):
                if DATASOURCE in json.dumps(target.get("datasource")) and target.get("rawSql"):
                    sql = expand(target["rawSql"], from_s, to_s, interval_s)
                    queries.append((panel.get("title", ""), sql))
    return queries


def expand(sql: str, from_s: float, to_s: float, interval_s: int) -> str:
    """The plugin's macros ($__timeFilter(col), $__fromTime, ...) for one time range."""
    start, end = int(from_s), int(to_s)

    def one(match: re.Match[str]) -> str:
        name, arg = match[1], (match[2] or "").strip()
        return {
            "timeFilter": f"{arg} >= toDateTime({start}) AND {arg} <= toDateTime({end})",
            "timeFilter_ms": f"{arg} >= {_ms(start)} AND {arg} <= {_ms(end)}",
            "dateFilter": f"{arg} >= toDate({start}) AND {arg} <= toDate({end})",
            "timeInterval": f"toStartOfInterval(toDateTime({arg}), INTERVAL {interval_s} second)",
            "fromTime": f"toDateTime({start})",
            "toTime": f"toDateTime({end})",
            "fromTime_ms": _ms(start),
            "toTime_ms": _ms(end),
            "interval_s": str(interval_s),
        }[name]

    return _MACRO.sub(one, sql)


def _ms(seconds: int) -> str:
    return f"fromUnixTimestamp64Milli({seconds * 1000})"


def _panels(dashboard: dict) -> list[dict]:
    found = []
    for panel in dashboard.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []))  # panels inside a collapsed row
    return found

"""deploy/monitoring/dashboard.json read as the tests need it: its panels and their queries, and
the queries with Grafana's variables replaced by concrete values for Prometheus's HTTP API."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "dashboard.json"
# What Grafana would put in: every job and model, and a window a 1 s scrape fills well.
VARIABLES = {"job": ".*", "model": ".*", "__rate_interval": "60s", "__interval": "15s"}


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel with queries (rows are only headings)."""
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title + refId, expr) for every target of every panel."""
    return [(f"{p['title']} [{t['refId']}]", t["expr"]) for p in panels(dashboard) for t in p["targets"]]


def concrete(expr: str) -> str:
    """``expr`` with ``$name`` / ``${name}`` replaced; an unknown variable raises KeyError."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: VARIABLES[m.group(1)], expr)

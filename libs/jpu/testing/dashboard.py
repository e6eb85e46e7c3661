"""The Grafana dashboard in the repo (compose/grafana/jpu-dashboard.json) as its queries, and the
metric names each PromQL query reads — to check them against what the services export (SPEC O4).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[3] / "compose" / "grafana" / "jpu-dashboard.json"

# PromQL words that are not metric names: aggregation modifiers, set operators, `offset`, ...
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or"}
    | {"unless", "offset", "inf", "nan"}
)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")  # label matchers: label names are not metrics
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGES = re.compile(r"\[[^\]]*\]")
_NUMBERS = re.compile(r"(?<![\w:])[0-9][0-9A-Za-z_.]*")  # 0.99, 1e3, and offset's 1h
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def panels(path: Path = DASHBOARD) -> list[dict[str, Any]]:
    """The dashboard's panels (Grafana JSON model)."""
    return list(json.loads(path.read_text())["panels"])


def queries(path: Path = DASHBOARD) -> dict[str, list[str]]:
    """Each panel's title → its targets' PromQL expressions."""
    return {p["title"]: [t["expr"] for t in p["targets"]] for p in panels(path)}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: the identifiers left once strings, label
    matchers, groupings, ranges and numbers are removed, other than function calls and keywords."""
    text = _STRINGS.sub(" ", expr)
    for pattern in (_MATCHERS, _GROUPING, _RANGES, _NUMBERS):
        text = pattern.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        word, rest = m.group(), text[m.end() :].lstrip()
        if word.lower() in _KEYWORDS or rest.startswith("("):
            continue
        names.add(word)
    return names

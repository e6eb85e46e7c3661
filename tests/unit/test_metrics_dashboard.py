"""SPEC O4: the Grafana dashboard in the repo reads only metrics the services export — names
derived from jpu.runtime.metrics' instruments through the real Prometheus exporter, not a hand
list —
and shows what operators watch: queue by state, cycle p99, lab usage, projection lag,
dispatch → running latency, failovers."""

from __future__ import annotations

import json

import pytest

from jpu.runtime.metrics_endpoint import exported_names
from jpu.testing.dashboard import DASHBOARD, metric_names, panels, queries

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_names()


def families(names: set[str]) -> set[str]:
    """One name per metric: a histogram's _bucket/_sum/_count series count as the histogram."""
    out = set()
    for n in names:
        for suffix in HISTOGRAM_SERIES:
            if n.endswith(suffix) and n.removesuffix(suffix) + "_bucket" in names:
                n = n.removesuffix(suffix)
                break
        out.add(n)
    return out


def test_O4_exported_names_follow_prometheus_conventions(exported: set[str]) -> None:
    assert exported, "no metric exported"
    for name in exported:
        assert name.startswith("jpu_"), name
    # counters end in _total, durations carry their unit (seconds)
    assert {"jpu_dispatches_total", "jpu_leader_acquisitions_total"} <= exported
    assert "jpu_dispatch_cycle_duration_seconds_bucket" in exported
    assert "jpu_job_start_delay_seconds_bucket" in exported


def test_O4_every_dashboard_query_reads_only_exported_metrics(exported: set[str]) -> None:
    for title, exprs in queries().items():
        assert exprs, f"panel {title!r} has no query"
        for expr in exprs:
            names = metric_names(expr)
            assert names, f"panel {title!r}: no metric in {expr!r}"
            assert names <= exported, f"panel {title!r}: not exported: {names - exported}"


def test_O4_dashboard_shows_the_operator_panels(exported: set[str]) -> None:
    used = {n for exprs in queries().values() for e in exprs for n in metric_names(e)}
    wanted = {
        "jpu_queue_length",  # queue by state
        "jpu_dispatch_cycle_duration_seconds_bucket",  # cycle p99
        "jpu_lab_usage",
        "jpu_projection_lag",
        "jpu_job_start_delay_seconds_bucket",  # dispatch → running
        "jpu_leader_acquisitions_total",  # failovers
    }
    assert wanted <= used, wanted - used
    # and no instrument is left off the dashboard
    assert families(exported) <= families(used), families(exported) - families(used)
    assert any("histogram_quantile(0.99" in e for e in queries()["Dispatch cycle p99 (s)"])


def test_O4_dashboard_is_an_importable_grafana_dashboard() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] and doc["title"] and isinstance(doc["schemaVersion"], int)
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for p in panels():
        assert p["datasource"]["type"] == "prometheus", p["title"]
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]), p["title"]
        assert all(t["refId"] for t in p["targets"]), p["title"]

"""SPEC O4: a real Prometheus (Debian's `prometheus`) scrapes every service of a running stack
through its `/metrics`, and its HTTP API answers the queue length, cycle time and projection lag
with the values the platform has. Every query of the repo's Grafana dashboard runs on it.

The stack gives each service its own metrics port and writes them to
<data dir>/metrics-targets.json (jpu.stack.metrics_targets); Prometheus discovers them from that
file, scraping every 0.5 s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest

from jpu.stack import metrics_targets
from jpu.stack.supervisor import SERVICES
from jpu.testing.dashboard import queries
from jpu.testing.e2e_stack import Stack, wait_until
from jpu.testing.prometheus import Prometheus, prometheus_or_skip

BINARY = prometheus_or_skip()
SCRAPE_S = 0.5
STACK_ENV = {"JPU_GATEWAY_WORKERS": "2"}
PROJECTIONS = {"jobs", "maintenance", "gpu_resources", "backfill", "lab_usage"}


@pytest.fixture(scope="module")
def prometheus(stack: Stack) -> Iterator[Prometheus]:
    workdir = stack.data_dir / "prometheus"
    workdir.mkdir()
    targets = stack.data_dir / metrics_targets.FILE
    scrape = [{"job_name": "jpu", "file_sd_configs": [{"files": [str(targets)]}]}]
    p = Prometheus(BINARY, workdir, scrape, SCRAPE_S)
    try:
        p.wait_ready()
        yield p
    finally:
        p.stop()


def test_O4_prometheus_scrapes_every_service_of_the_stack(
    stack: Stack, prometheus: Prometheus
) -> None:
    services = set(SERVICES) | {"gateway-2"}  # JPU_GATEWAY_WORKERS=2

    def all_up() -> dict[str, float] | None:
        up = prometheus.values('up{job="jpu"}', "service")
        return up if up.keys() == services and all(v == 1 for v in up.values()) else None

    wait_until(all_up, 30, lambda: f"every service up: {prometheus.targets()}")
    # the gateway also answers /metrics on its API port, without a token (like /healthz)
    r = httpx.get(f"{stack.url}/metrics", timeout=5)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "process_resident_memory_bytes" in r.text


def test_O4_queue_length_cycle_time_and_projection_lag_from_the_prometheus_api(
    stack: Stack, prometheus: Prometheus
) -> None:
    alice = stack.api("bcg-alice")
    held = [alice.submit(stack.hold(f"prom-{i}"), name=f"prom-{i}")["id"] for i in range(3)]
    for job in held:
        alice.wait(job, ["RUNNING"], timeout=30)

    # queue length: the three running jobs, nothing waiting (S1: every live state reported)
    def queue() -> dict[str, float] | None:
        q = prometheus.values('jpu_queue_length{service="dispatcher"}', "state")
        return q if q.get("RUNNING") == 3 else None

    q = wait_until(queue, 30, lambda: f"RUNNING = 3 in {prometheus.query('jpu_queue_length')}")
    assert q["GLOBAL_QUEUE_WAIT"] == 0 and q["PERSONAL_QUEUE_WAIT"] == 0, q

    # cycle time: the dispatcher's cycles, p99 from the histogram in seconds (D3)
    p99 = (
        "histogram_quantile(0.99, sum by (le) "
        "(rate(jpu_dispatch_cycle_duration_seconds_bucket[30s])))"
    )

    def cycle_p99() -> float | None:
        got = prometheus.query(p99)
        value = float(got[0]["value"][1]) if got else math.nan
        return value if math.isfinite(value) else None

    assert 0 < wait_until(cycle_p99, 30, "a finite cycle p99") < 5.0
    cycles = prometheus.values("jpu_dispatch_cycle_duration_seconds_count", "service")
    assert cycles.get("dispatcher", 0) >= 3, cycles

    # projection lag: every projection reports, and each catches up to 0 (E3)
    def caught_up() -> dict[str, float] | None:
        lag = prometheus.values("max by (projection) (jpu_projection_lag)", "projection")
        return lag if lag.keys() >= PROJECTIONS and not any(lag.values()) else None

    wait_until(caught_up, 30, lambda: f"lag 0: {prometheus.query('jpu_projection_lag')}")

    # dispatch → running: one sample per started job, a plausible time (X1)
    starts = "sum(jpu_job_start_delay_seconds_count)"
    wait_until(lambda: prometheus.values(starts, "").get("", 0) >= 3, 30, "3 start delays")
    mean = prometheus.values(
        "sum(jpu_job_start_delay_seconds_sum) / sum(jpu_job_start_delay_seconds_count)", ""
    )[""]
    assert 0 <= mean < 30, mean
    # the one dispatcher took the lease once; dispatches counted by tier; usage per lab
    leads = prometheus.values("jpu_leader_acquisitions_total", "role")
    assert leads == {"dispatcher": 1}, leads
    assert sum(prometheus.values("jpu_dispatches_total", "tier").values()) >= 3
    # lab usage: once the jobs end, BCG is charged for them (F1) and reads > 0 (F3: decayed)
    stack.release(*(f"prom-{i}" for i in range(3)))
    for job in held:
        alice.wait(job, ["COMPLETED"], timeout=30)
    usage = 'jpu_lab_usage{lab="BCG"}'
    wait_until(lambda: prometheus.values(usage, "lab").get("BCG", 0) > 0, 30, "BCG usage > 0")


def test_O4_every_dashboard_query_runs_on_prometheus(stack: Stack, prometheus: Prometheus) -> None:
    """The dashboard's PromQL parses and evaluates on a real Prometheus; the panels fed by what
    the previous test did have data."""
    answered = {}
    for exprs in queries().values():
        for expr in exprs:
            answered[expr] = prometheus.query(expr)  # a PromQL error fails here, naming it
    for expr in ("max by (state) (jpu_queue_length)", "max by (projection) (jpu_projection_lag)"):
        assert answered[expr], expr


def test_O4_rare_counters_read_zero_before_their_first_event(
    stack: Stack, prometheus: Prometheus
) -> None:
    """Issue 34.7: a counter whose event has not happened (a projection fault, a parked message,
    a backfill preemption) has a series at 0 from its service's start, per projection, durable
    and tier, so an alert on its increase (compose/prometheus/alerts.yml) sees data, not a gap."""
    tiers = {"rtx4090", "rtx3080ti"}

    def labelled(metric: str, label: str, want: set[str]) -> dict[str, float] | None:
        got = prometheus.values(f"max by ({label}) ({metric})", label)
        return got if got.keys() >= want else None

    faults = wait_until(
        lambda: labelled("jpu_projection_faults_total", "projection", PROJECTIONS),
        30,
        lambda: f"faults per projection: {prometheus.query('jpu_projection_faults_total')}",
    )
    assert not any(faults.values()), faults
    preemptions = wait_until(
        lambda: labelled("jpu_backfill_preemptions_total", "tier", tiers),
        30,
        lambda: f"preemptions per tier: {prometheus.query('jpu_backfill_preemptions_total')}",
    )
    assert not any(preemptions.values()), preemptions
    parked = wait_until(
        lambda: prometheus.values("jpu_bus_parked_total", "durable") or None,
        30,
        "a parked series per durable consumer",
    )
    consumed = prometheus.values("max by (durable) (jpu_bus_consumed_total)", "durable")
    assert parked.keys() == consumed.keys() and not any(parked.values()), (parked, consumed)
    assert labelled("jpu_reservations_total", "tier", tiers), prometheus.query(
        "jpu_reservations_total"
    )

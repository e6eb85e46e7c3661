"""SPEC O4: the metrics, read through the OpenTelemetry SDK's own InMemoryMetricReader while the
real dispatcher, accounting, projection runner and backfill service run on real NATS JetStream
and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import msgspec
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from jpu.bus import EventBus
from jpu.config import Config, LabConfig, Node, load_config
from jpu.events import BackfillEnded
from jpu.policy.fairshare import decayed
from jpu.policy.model import LabUsage
from jpu.runtime import metrics
from jpu.runtime.clock import FakeClock
from jpu.store import last_applied, run_projection, wait_applied
from jpu.store.projections import jobs
from jpu.testing.fold import Watcher, end_job, job_id, start_job, submit_global
from jpu.testing.pg_fixtures import sample_log
from jpu.testing.stack import TIER, start_stack
from jpu_services.accounting.service import run_accounting
from jpu_services.dispatcher.service import DispatcherStats, run_dispatcher

G4090 = ["rtx4090"]


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    """A real SDK MeterProvider of this test's own (the global one can be set once per process)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.use_meter_provider(provider)
    try:
        yield reader
    finally:
        metrics.use_meter_provider(None)
        provider.shutdown()


def points(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
    """One collection: the data points of metric `name` by their sorted attributes."""
    out: dict[tuple[tuple[str, Any], ...], Any] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    for p in m.data.data_points:
                        out[tuple(sorted((p.attributes or {}).items()))] = p
    return out


def values(reader: InMemoryMetricReader, name: str, attribute: str) -> dict[str, float]:
    return {dict(k)[attribute]: p.value for k, p in points(reader, name).items()}


def nonzero(series: dict[str, float]) -> dict[str, float]:
    """The series that counted something: every tier's counter exists at 0 from the start (issue
    34.7, jpu.runtime.metrics.announce_*), so a test of what happened reads the non-zero ones."""
    return {k: v for k, v in series.items() if v}


def count(reader: InMemoryMetricReader, name: str, **attrs: str) -> float:
    return sum(p.value for k, p in points(reader, name).items() if attrs.items() <= dict(k).items())


async def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (result := check()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached in {timeout} s: {result!r}")
        await asyncio.sleep(0.02)
    return result


@asynccontextmanager
async def service(coro_fn, *args, **kw) -> AsyncIterator[asyncio.Task]:
    stop = asyncio.Event()
    task = asyncio.create_task(coro_fn(*args, stop, **kw))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


def fast_config(**kw: Any) -> Config:
    return msgspec.structs.replace(load_config(env={}), cycle_s=0.5, min_cycle_gap_s=0.02, **kw)


async def test_O4_dispatcher_reports_queue_dispatches_reservations_and_cycle_duration(
    bus: EventBus, reader: InMemoryMetricReader
):
    config, clock, stats = fast_config(), FakeClock(1000.0), DispatcherStats()
    async with Watcher(bus, config) as w, service(run_dispatcher, bus, config, clock, stats=stats):
        fillers = [job_id() for _ in range(3)]
        for f in fillers:
            await submit_global(bus, clock, f, "OTH", "olga", 1, tiers=G4090)
        await w.until(lambda s: all(s.jobs[f].state == "DISPATCHED" for f in fillers))
        # 3 of the 4 rtx4090 GPUs busy: a 2-GPU job reserves the free one (R1), two 1-GPU wait
        x, others = job_id(), [job_id(), job_id()]
        clock.advance(10)  # D1: X ranks before them (queue_entered_at)
        await submit_global(bus, clock, x, "BCG", "alice", 2, tiers=G4090)
        await w.until(lambda s: s.jobs[x].state == "RESERVING")
        for o in others:
            clock.advance(1)
            await submit_global(bus, clock, o, "KDG", "carol", 1, tiers=G4090)
        want = {"GLOBAL_QUEUE_WAIT": 2, "RESERVING": 1, "DISPATCHED": 3, "RUNNING": 0}
        await until(lambda: values(reader, "jpu.queue.length", "state").items() >= want.items())
        assert values(reader, "jpu.queue.length", "state")["PERSONAL_QUEUE_WAIT"] == 0
        assert nonzero(values(reader, "jpu.dispatches", "tier")) == {"rtx4090": 3}
        assert count(reader, "jpu.reservations", outcome="started", tier="rtx4090") == 1
        assert count(reader, "jpu.reservations", outcome="ended") == 0
        # the filler on X's node ends: X grows, its reservation ends as it dispatches (R2)
        node = w.state.jobs[x].reservation.node
        filler = next(f for f in fillers if w.state.jobs[f].placement[0] == node)
        await start_job(bus, w.state, clock, filler)
        await w.until(lambda s: s.jobs[filler].state == "RUNNING")
        clock.advance(60)
        await end_job(bus, w.state, config, clock, filler)
        await w.until(lambda s: s.jobs[x].state == "DISPATCHED")
        want = {"GLOBAL_QUEUE_WAIT": 2, "RESERVING": 0, "DISPATCHED": 3, "RUNNING": 0}
        await until(lambda: values(reader, "jpu.queue.length", "state").items() >= want.items())
        assert nonzero(values(reader, "jpu.dispatches", "tier")) == {"rtx4090": 4}
        assert count(reader, "jpu.reservations", outcome="ended", reason="dispatched") == 1
        # one histogram sample per completed cycle, in seconds
        (cycles,) = points(reader, "jpu.dispatch.cycle.duration").values()
        assert cycles.count == len(stats.cycle_ms) >= 2
        assert cycles.sum == pytest.approx(sum(stats.cycle_ms) / 1000)
        assert 0 < cycles.max < 5.0


async def test_O4_projection_lag_counts_events_behind_and_reaches_zero(
    bus: EventBus, pool: asyncpg.Pool, reader: InMemoryMetricReader
):
    last = (await bus.append_many(sample_log(30)))[-1]
    assert last > 100
    release, stop = asyncio.Event(), asyncio.Event()

    async def hold(_seq: int) -> None:  # each batch is committed, then held before its ack
        await release.wait()

    task = asyncio.create_task(
        run_projection(
            bus, pool, jobs.projection, stop=stop, batch=50, after_commit=hold, lag_every_s=0.05
        )
    )
    try:
        lag, applied = None, 0
        for _ in range(500):  # held after its first batch: lag = what is not applied yet
            applied = await last_applied(pool, "jobs")
            lag = values(reader, "jpu.projection.lag", "projection").get("jobs")
            if applied and lag == last - applied:
                break
            await asyncio.sleep(0.02)
        assert 0 < applied < last and lag == last - applied, (applied, lag, last)
        release.set()
        await wait_applied(pool, "jobs", last, timeout=10)
        await until(lambda: values(reader, "jpu.projection.lag", "projection") == {"jobs": 0})
    finally:
        release.set()
        stop.set()
        await asyncio.wait_for(task, 15)
    # a stopped runner no longer reports its projection
    assert "jobs" not in values(reader, "jpu.projection.lag", "projection")


def usage_config() -> Config:
    return fast_config(
        nodes=[Node(name="gpu-4090x2-01", gpus={"rtx4090": 2})],
        labs=[LabConfig(name="BCG", usage=24_000), LabConfig(name="KDG")],
    )


async def test_O4_lab_usage_is_decayed_usage_per_lab_as_the_projection_has_it(
    bus: EventBus, pool: asyncpg.Pool, reader: InMemoryMetricReader
):
    config, clock = usage_config(), FakeClock(0.0)
    half_life = config.half_life_s
    async with (
        Watcher(bus, config) as w,
        service(run_accounting, bus, config, clock, pool=pool),
        service(run_dispatcher, bus, config, clock),
    ):
        usage = lambda: values(reader, "jpu.lab.usage", "lab")  # noqa: E731
        # the starting usage charged at load; a lab without usage reads 0 (F6)
        await until(lambda: usage() == {"BCG": 24_000.0, "KDG": 0.0})
        clock.advance(half_life)
        assert usage() == pytest.approx({"BCG": 12_000.0, "KDG": 0.0})  # F3, decayed to now
        j = job_id()
        await submit_global(bus, clock, j, "KDG", "carol", 1)
        await w.until(lambda s: s.jobs[j].state == "DISPATCHED")
        await start_job(bus, w.state, clock, j)
        await w.until(lambda s: s.jobs[j].state == "RUNNING")
        clock.advance(100)
        await end_job(bus, w.state, config, clock, j)
        await until(lambda: usage().get("KDG", 0) > 0)
        bcg = decayed(LabUsage(24_000.0, 0.0), clock.now(), half_life)  # 100 s more of decay
        assert usage() == pytest.approx({"BCG": bcg, "KDG": 100 * 82.6})
        # the same figures as the lab usage projection's rows, decayed to now
        await w.until(lambda s: "KDG" in s.lab_seq)
        await wait_applied(pool, "lab_usage", w.state.lab_seq["KDG"], timeout=10)
        rows = await pool.fetch("SELECT lab, value, as_of FROM lab_usage")
        projected = {
            r["lab"]: decayed(LabUsage(r["value"], r["as_of"]), clock.now(), half_life)
            for r in rows
        }
        assert usage() == pytest.approx(projected)


async def test_O4_backfill_preemption_counted_and_every_projection_catches_up(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, reader: InMemoryMetricReader
):
    async with start_stack(nats_url, pool, pg_dsn) as s:
        await s.until(lambda st: len(st.backfill) == 2)
        assert count(reader, "jpu.backfill.preemptions") == 0
        await s.submit("bcg-alice", "sleep 30")  # research on a backfilled GPU (B2)
        await until(lambda: count(reader, "jpu.backfill.preemptions") == 1, timeout=10)
        ended = await s.events(BackfillEnded)
        assert [e.reason for e in ended] == ["preempted"]
        assert nonzero(values(reader, "jpu.backfill.preemptions", "tier")) == {TIER: 1}
        assert nonzero(values(reader, "jpu.dispatches", "tier")) == {TIER: 1}
        # dispatch → running of that job, by its events' own times, once its start is appended
        await until(lambda: points(reader, "jpu.job.start.delay"), timeout=10)
        ((attrs, delay),) = points(reader, "jpu.job.start.delay").items()
        assert dict(attrs) == {"tier": TIER} and delay.count == 1 and 0 <= delay.sum < 30
        # the runners sample every 5 s: each of the stack's projections reports, at lag 0
        names = {"jobs", "maintenance", "gpu_resources", "backfill", "lab_usage"}

        def caught_up() -> bool:
            lags = values(reader, "jpu.projection.lag", "projection")
            return lags.keys() >= names and not any(lags.values())

        await until(caught_up, timeout=20)


CONSOLE = """
from jpu.runtime import metrics
from jpu.runtime.telemetry import setup_telemetry
metrics.count_preemption("early")  # before setup: the global proxy, dropped
setup_telemetry("o4-console")
metrics.count_preemption("rtx4090")
metrics.record_cycle(0.004)
"""


def test_O4_console_exporter_prints_the_metrics_without_a_collector():
    env = {**os.environ, "JPU_OTEL_CONSOLE": "1", "OTEL_METRIC_EXPORT_INTERVAL": "60000"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    out = subprocess.run(
        [sys.executable, "-c", CONSOLE], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    # the provider's shutdown at exit exports once (ConsoleMetricExporter: JSON on stdout)
    assert '"name": "jpu.backfill.preemptions"' in out.stdout
    assert '"tier": "rtx4090"' in out.stdout and '"early"' not in out.stdout
    assert '"name": "jpu.dispatch.cycle.duration"' in out.stdout and '"unit": "s"' in out.stdout


async def test_O4_leader_acquisitions_count_the_start_and_each_failover(
    bus: EventBus, reader: InMemoryMetricReader
):
    """SPEC E4: two dispatchers, one leads (1); the leader stops, the standby takes over (2)."""
    config, clock = fast_config(), FakeClock(100.0)
    stats = [DispatcherStats(), DispatcherStats()]
    stops = [asyncio.Event(), asyncio.Event()]
    tasks = [
        asyncio.create_task(
            run_dispatcher(bus, config, clock, stops[i], holder=f"m{i}", stats=stats[i])
        )
        for i in range(2)
    ]
    try:
        await until(lambda: any(s.leader for s in stats), timeout=20)
        leader = 0 if stats[0].leader else 1
        assert values(reader, "jpu.leader.acquisitions", "role") == {"dispatcher": 1}
        stops[leader].set()  # a graceful stop releases the lease at once
        await asyncio.wait_for(tasks[leader], 15)
        await until(lambda: stats[1 - leader].leader, timeout=20)
        assert values(reader, "jpu.leader.acquisitions", "role") == {"dispatcher": 2}
    finally:
        for s in stops:
            s.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 15)

"""SPEC O4 metrics: the instruments, and the one-line calls the service edges make.

    instrument                   kind              unit           attributes
    jpu.queue.length             observable gauge  {job}          state
    jpu.dispatch.cycle.duration  histogram         s              -
    jpu.dispatches               counter           {dispatch}     tier
    jpu.reservations             counter           {reservation}  outcome (started|ended), reason
    jpu.backfill.preemptions     counter           {preemption}   tier
    jpu.lab.usage                observable gauge  {TFLOP-s}      lab
    jpu.projection.lag           observable gauge  {event}        projection
    jpu.projection.faults        counter           {event}        projection
    jpu.job.start.delay          histogram         s              tier
    jpu.leader.acquisitions      counter           {acquisition}  role
    jpu.bus.consumer_lag         observable gauge  {message}      durable
    jpu.bus.consumed             counter           {event}        durable
    jpu.bus.parked               counter           {message}      durable
    jpu.auth.failures            counter           {request}      outcome (refused|throttled)
    jpu.webhooks.refused         counter           {request}      -

Recorded where the fact is known: the dispatcher's writer (each decision appended), its loop
(each cycle; each time a copy begins leading: a start or a failover, SPEC E4), the backfill
service (each preemption it records), the projection runner (lag), accounting (lab usage), the
agent (JobDispatched → JobStarted, once the start is appended), every durable consumer (the bus).
The gauges read sources the edges register for as long as they run (or values set directly); the
SDK calls them from its export thread, so a source only copies plain data.

Prometheus reads the same instruments (jpu.runtime.metrics_endpoint: `/metrics`); its names follow
from these by the exporter's rules, e.g. jpu_queue_length,
jpu_dispatch_cycle_duration_seconds_bucket, jpu_dispatches_total.

Instruments live on the global MeterProvider (installed by jpu.runtime.telemetry.setup_telemetry); a
test records on its own SDK provider with `use_meter_provider(provider)` instead, since the global
one can be set only once per process. The pure core never imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Meter, Observation

from jpu.config import Config
from jpu.domain.states import SLOT_STATES, TERMINAL, JobView
from jpu.events import Event, JobDispatched, ReservationReleased, ReservationStarted
from jpu.policy.fairshare import decayed
from jpu.policy.model import LabUsage
from jpu.runtime.clock import Clock

log = logging.getLogger(__name__)

# Reported even at 0, so a drained queue reads 0 rather than vanishing from the series.
QUEUE_STATES = ("PERSONAL_QUEUE_WAIT", *sorted(SLOT_STATES))  # every live state (S1)
# A dispatch cycle takes milliseconds; the SDK's default buckets are sized for milliseconds.
CYCLE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# JobDispatched → JobStarted: a local start takes well under a second, a Slurm one seconds.
START_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

Source = Callable[[], Mapping[str, float]]


class _Gauge:
    """The sources behind one observable gauge; a later source wins on the same attribute."""

    def __init__(self, attribute: str) -> None:
        self.attribute = attribute
        self._sources: dict[int, Source] = {}
        self._ids = itertools.count()
        self.latest: dict[str, float] = {}  # set directly: values that live as long as the process
        GAUGES.append(self)

    @contextlib.contextmanager
    def source(self, read: Source) -> Iterator[None]:
        _instruments()  # the gauges exist once anything is observed
        key = next(self._ids)
        self._sources[key] = read
        try:
            yield
        finally:
            self._sources.pop(key, None)

    def observe(self, _: CallbackOptions) -> Iterable[Observation]:
        merged = dict(self.latest)
        for read in list(self._sources.values()):  # one C-level copy: safe from another thread
            merged.update(read())
        return [Observation(v, {self.attribute: k}) for k, v in merged.items()]


GAUGES: list[_Gauge] = []  # every observable gauge (jpu.runtime.metrics_endpoint lists their names)
_queue, _usage, _lag = _Gauge("state"), _Gauge("lab"), _Gauge("projection")
_consumer_lag = _Gauge("durable")
_outputs_free = _Gauge("root")
_log_size = _Gauge("stream")


@dataclass(frozen=True)
class _Instruments:
    cycle_duration: Histogram
    dispatches: Counter
    reservations: Counter
    preemptions: Counter
    faults: Counter
    start_delay: Histogram
    leader_acquisitions: Counter
    consumed: Counter
    parked: Counter
    auth_failures: Counter
    webhooks_refused: Counter
    outputs_pruned: Counter


def _create(meter: Meter) -> _Instruments:
    meter.create_observable_gauge(
        "jpu.queue.length", [_queue.observe], unit="{job}", description="jobs per live state"
    )
    meter.create_observable_gauge(
        "jpu.lab.usage", [_usage.observe], unit="{TFLOP-s}", description="decayed lab usage (F3)"
    )
    meter.create_observable_gauge(
        "jpu.projection.lag",
        [_lag.observe],
        unit="{event}",
        description="events between the stream's last sequence and the projection's position",
    )
    meter.create_observable_gauge(
        "jpu.bus.consumer_lag",
        [_consumer_lag.observe],
        unit="{message}",
        description="messages a durable consumer has not been delivered yet",
    )
    meter.create_observable_gauge(
        "jpu.log.size",
        [_log_size.observe],
        unit="By",
        description="bytes of the event stream (the log, kept whole for the audit: E6)",
    )
    meter.create_observable_gauge(
        "jpu.outputs.disk.free_ratio",
        [_outputs_free.observe],
        unit="1",
        description="free fraction of the file system holding the job outputs (X2)",
    )
    return _Instruments(
        cycle_duration=meter.create_histogram(
            "jpu.dispatch.cycle.duration",
            unit="s",
            description="one dispatch cycle: duties, policy, appends (D3)",
            explicit_bucket_boundaries_advisory=list(CYCLE_BUCKETS_S),
        ),
        dispatches=meter.create_counter(
            "jpu.dispatches", unit="{dispatch}", description="JobDispatched appended"
        ),
        reservations=meter.create_counter(
            "jpu.reservations", unit="{reservation}", description="reservations started / ended"
        ),
        preemptions=meter.create_counter(
            "jpu.backfill.preemptions",
            unit="{preemption}",
            description="backfill instances ended by a research dispatch (B2)",
        ),
        faults=meter.create_counter(
            "jpu.projection.faults",
            unit="{event}",
            description="events a projection could not apply (recorded in projection_faults)",
        ),
        start_delay=meter.create_histogram(
            "jpu.job.start.delay",
            unit="s",
            description="JobDispatched to JobStarted of one attempt (X1)",
            explicit_bucket_boundaries_advisory=list(START_BUCKETS_S),
        ),
        leader_acquisitions=meter.create_counter(
            "jpu.leader.acquisitions",
            unit="{acquisition}",
            description="a copy began leading behind its lease: a start or a failover (E4)",
        ),
        consumed=meter.create_counter(
            "jpu.bus.consumed", unit="{event}", description="events handled and acked"
        ),
        parked=meter.create_counter(
            "jpu.bus.parked", unit="{message}", description="messages parked on the DLQ"
        ),
        auth_failures=meter.create_counter(
            "jpu.auth.failures", unit="{request}", description="failed authentications (SEC5)"
        ),
        webhooks_refused=meter.create_counter(
            "jpu.webhooks.refused",
            unit="{request}",
            description="webhook sends refused: a forbidden destination (SEC4)",
        ),
        outputs_pruned=meter.create_counter(
            "jpu.outputs.pruned",
            unit="{job}",
            description="ended jobs' output directories removed after outputs_keep_days",
        ),
    )


_global: _Instruments | None = None  # on the global provider, created on first use
_override: _Instruments | None = None  # a test's own provider


def _instruments() -> _Instruments:
    global _global
    if _override is not None:
        return _override
    if _global is None:  # a proxy until setup_telemetry installs the SDK provider
        _global = _create(metrics.get_meter("jpu"))
    return _global


def use_meter_provider(provider: metrics.MeterProvider | None) -> None:
    """Record on `provider` from now on (a test's SDK provider); None: the global one again."""
    global _override
    _override = None if provider is None else _create(provider.get_meter("jpu"))


# --- calls at the edges ------------------------------------------------------------------------


# Announced at an edge's start: a counter's series exists at 0 before its first event, so a
# dashboard or an alert rule (compose/prometheus/alerts.yml) reads 0, not a missing series.


def announce_consumer(durable: str) -> None:
    m = _instruments()
    m.consumed.add(0, {"durable": durable})
    m.parked.add(0, {"durable": durable})


def announce_projection(projection: str) -> None:
    _instruments().faults.add(0, {"projection": projection})


def announce_dispatcher(tiers: Iterable[str]) -> None:
    m = _instruments()
    m.leader_acquisitions.add(0, {"role": "dispatcher"})
    for tier in tiers:
        m.dispatches.add(0, {"tier": tier})
        m.reservations.add(0, {"outcome": "started", "tier": tier})


def announce_backfill(tiers: Iterable[str]) -> None:
    m = _instruments()
    for tier in tiers:
        m.preemptions.add(0, {"tier": tier})


def record_cycle(seconds: float) -> None:
    _instruments().cycle_duration.record(seconds)


def record_appended(event: Event) -> None:
    """A decision the dispatcher appended (once: after the append succeeded)."""
    m = _instruments()
    if isinstance(event, JobDispatched):
        m.dispatches.add(1, {"tier": event.tier})
    elif isinstance(event, ReservationStarted):
        m.reservations.add(1, {"outcome": "started", "tier": event.tier})
    elif isinstance(event, ReservationReleased):
        m.reservations.add(1, {"outcome": "ended", "reason": event.reason, "tier": event.tier})


def count_fault(projection: str) -> None:
    """An event a projection could not apply (recorded in projection_faults: an alarm)."""
    _instruments().faults.add(1, {"projection": projection})


def count_preemption(tier: str) -> None:
    _instruments().preemptions.add(1, {"tier": tier})


def record_start_delay(seconds: float, tier: str) -> None:
    """An attempt's JobStarted was appended `seconds` after its JobDispatched (event times)."""
    _instruments().start_delay.record(max(seconds, 0.0), {"tier": tier})


def count_leading(role: str) -> None:
    """A copy of `role` (e.g. dispatcher) began leading: at start, or taking over (SPEC E4)."""
    _instruments().leader_acquisitions.add(1, {"role": role})


def observe_consumer_lag(durable: str, pending: int) -> None:
    """A durable consumer's messages not delivered yet, as of its last fetch."""
    _instruments()  # the gauge exists once anything is observed
    _consumer_lag.latest[durable] = float(pending)


def count_consumed(durable: str, n: int) -> None:
    _instruments().consumed.add(n, {"durable": durable})


def count_parked(durable: str) -> None:
    _instruments().parked.add(1, {"durable": durable})


def queue_lengths(jobs: Mapping[str, JobView]) -> dict[str, int]:
    counts = dict.fromkeys(QUEUE_STATES, 0)
    for job in list(jobs.values()):  # a copy: the event loop may add jobs meanwhile
        if job.state not in TERMINAL:
            counts[job.state] = counts.get(job.state, 0) + 1
    return counts


def observing_queue(jobs: Mapping[str, JobView]) -> contextlib.AbstractContextManager[None]:
    """`jpu.queue.length{state}` from a followed state's jobs while the context is open."""
    return _queue.source(lambda: queue_lengths(jobs))


def observing_usage(
    usage: Mapping[str, LabUsage], config: Config, clock: Clock
) -> contextlib.AbstractContextManager[None]:
    """`jpu.lab.usage{lab}`: each lab's stored usage decayed to now (F3); 0 without any (F6)."""

    def read() -> dict[str, float]:
        now = clock.now()
        out = dict.fromkeys((lab.name for lab in config.labs), 0.0)
        for lab, u in list(usage.items()):
            out[lab] = decayed(u, now, config.half_life_s)
        return out

    return _usage.source(read)


async def sample_lag(
    projection: str, measure: Callable[[], Awaitable[int]], stop: asyncio.Event, every_s: float
) -> None:
    """Keep `jpu.projection.lag{projection}` fresh: `measure()` every `every_s` until `stop`."""
    await _sample(_lag, projection, measure, stop, every_s)


async def sample_log_size(
    stream: str, measure: Callable[[], Awaitable[int]], stop: asyncio.Event, every_s: float
) -> None:
    """Keep `jpu.log.size{stream}` fresh: `measure()` every `every_s` until `stop`."""
    await _sample(_log_size, stream, measure, stop, every_s)


async def _sample(
    gauge: _Gauge,
    key: str,
    measure: Callable[[], Awaitable[int]],
    stop: asyncio.Event,
    every_s: float,
) -> None:
    last: dict[str, float] = {}
    with gauge.source(lambda: dict(last)):
        while not stop.is_set():
            try:
                last[key] = float(await measure())
            except Exception as e:  # a metric never stops the service measuring it
                log.debug("%s of %s not measured: %r", gauge.attribute, key, e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)


def count_auth_failure(outcome: str) -> None:
    """A failed authentication (`refused`: 401) or a throttled request (`throttled`: 429)."""
    _instruments().auth_failures.add(1, {"outcome": outcome})


def count_webhook_refused() -> None:
    _instruments().webhooks_refused.add(1)


def count_outputs_pruned(n: int = 1) -> None:
    """n = 0 announces the counter (SPEC O4: at 0 from the start)."""
    _instruments().outputs_pruned.add(n)


def observing_outputs_disk(root: Path) -> contextlib.AbstractContextManager[None]:
    """`jpu.outputs.disk.free_ratio{root}` read on each collection while the agent runs."""

    def read() -> dict[str, float]:
        try:
            st = os.statvfs(root)
        except OSError:  # not created yet: nothing to report
            return {}
        return {str(root): st.f_bavail / st.f_blocks if st.f_blocks else 0.0}

    return _outputs_free.source(read)

"""The bus's OpenTelemetry: trace context through event headers (SPEC E5) and consumer metrics
(SPEC O4: event lag per projection, consumed and parked counts). No-ops without an SDK."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation

from jpu.bus.model import Delivered
from jpu.runtime.telemetry import extract_context, meter, tracer

_tracer = tracer("jpu.bus")
_meter = meter("jpu.bus")
_consumed = _meter.create_counter("jpu.bus.consumed", description="events handled and acked")
_parked = _meter.create_counter("jpu.bus.parked", description="messages parked on the DLQ")
_lag: dict[str, int] = {}
_MAX_LINKS = 64


def _observe(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(v, {"durable": d}) for d, v in _lag.items()]


_meter.create_observable_gauge(
    "jpu.bus.consumer_lag", callbacks=[_observe], description="messages not yet delivered"
)


def observe_lag(durable: str, pending: int) -> None:
    _lag[durable] = pending


def count_consumed(durable: str, n: int) -> None:
    _consumed.add(n, {"durable": durable})


def count_parked(durable: str) -> None:
    _parked.add(1, {"durable": durable})


@contextmanager
def consume_span(durable: str, batch: list[Delivered]) -> Iterator[trace.Span]:
    """One event: a child of its producer's span. A batch: one span linked to every producer."""
    attrs: dict[str, str | int] = {
        "messaging.system": "nats",
        "jpu.durable": durable,
        "jpu.batch_size": len(batch),
        "jpu.first_seq": batch[0].seq,
        "jpu.last_seq": batch[-1].seq,
    }
    if len(batch) == 1:
        d = batch[0]
        name = f"consume {d.event.__struct_config__.tag}"
        ctx = extract_context(d.headers)
        with _tracer.start_as_current_span(name, context=ctx, attributes=attrs) as span:
            yield span
        return
    links = []
    for d in batch[:_MAX_LINKS]:
        sc = trace.get_current_span(extract_context(d.headers)).get_span_context()
        if sc.is_valid:
            links.append(trace.Link(sc))
    with _tracer.start_as_current_span(f"consume {durable}", links=links, attributes=attrs) as span:
        yield span

"""The bus's OpenTelemetry: trace context through event headers (SPEC E5) and consumer metrics
(SPEC O4: event lag per projection, consumed and parked counts). No-ops without an SDK."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace

from jpu.bus.model import Delivered

# The consumer metrics are instruments of jpu.runtime.metrics, the one registry (SPEC O4)
from jpu.runtime.metrics import announce_consumer as announce_consumer
from jpu.runtime.metrics import count_consumed as count_consumed
from jpu.runtime.metrics import count_parked as count_parked
from jpu.runtime.metrics import observe_consumer_lag
from jpu.runtime.telemetry import extract_context, tracer

observe_lag = observe_consumer_lag
_tracer = tracer("jpu.bus")
_MAX_LINKS = 64


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

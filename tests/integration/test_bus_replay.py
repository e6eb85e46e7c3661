"""Reading the log back: replay for audits (SPEC E6) and trace context across services (E5)."""

from __future__ import annotations

import asyncio
import contextlib

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jpu.bus import Delivered, EventBus
from jpu.events import JobPromoted, MaintenanceChanged, new_event_id
from jpu.runtime.telemetry import extract_context, inject_headers


def promoted(job_id: str, ts: float) -> JobPromoted:
    return JobPromoted(event_id=new_event_id(), ts=ts, job_id=job_id, queue_entered_at=ts)


async def test_replay_from_sequence_and_until_time(bus: EventBus):
    events = [promoted(f"r{i % 2}", float(i)) for i in range(1, 11)]
    seqs = await bus.append_many(events)
    await bus.js.publish(f"{bus.prefix}.job.r0", b"garbage")  # skipped, not fatal
    tail = await bus.append(
        MaintenanceChanged(event_id=new_event_id(), ts=11.0, state="DRAINING", by="ops")
    )

    everything = [d async for d in bus.replay()]
    assert [d.event for d in everything] == [*events, everything[-1].event]
    assert everything[-1].seq == tail

    from_4 = [d.seq async for d in bus.replay(start_seq=seqs[3])]
    assert from_4 == [*seqs[3:], tail]

    until_5 = [d.event.ts async for d in bus.replay(until_ts=5.0)]
    assert until_5 == [1.0, 2.0, 3.0, 4.0, 5.0]

    only_r1 = [
        d.event for d in [d async for d in bus.replay(filter_subject=f"{bus.prefix}.job.r1")]
    ]
    assert only_r1 == events[0::2]

    assert [d async for d in bus.replay(start_seq=tail + 1)] == []
    assert await bus.last_seq() == tail


async def test_replay_stops_at_the_last_sequence_of_the_call(bus: EventBus):
    seqs = await bus.append_many([promoted("s", float(i)) for i in range(600)])
    seen: list[int] = []
    async for d in bus.replay():
        if not seen:  # the log keeps growing while an audit reads it
            await bus.append_many([promoted("s", 1000.0 + i) for i in range(50)])
        seen.append(d.seq)
    assert seen == seqs


async def test_replay_can_be_abandoned_midway(bus: EventBus):
    await bus.append_many([promoted("a", float(i)) for i in range(20)])
    stream_consumers = (await bus.js.stream_info(bus.stream)).state.consumer_count
    reader = bus.replay()
    async with contextlib.aclosing(reader):
        async for d in reader:
            if d.event.ts >= 3:
                break
    # The ephemeral reader is gone, not left to the server's inactivity timer.
    assert (await bus.js.stream_info(bus.stream)).state.consumer_count == stream_consumers


async def test_trace_context_propagates_in_headers(bus: EventBus):
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    spans = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = trace.get_tracer("test")

    with tracer.start_as_current_span("gateway submit") as producer:
        seq = await bus.append(promoted("tr", 1.0))
    trace_id = producer.get_span_context().trace_id

    # 1. The stored event carries the W3C traceparent of the producer's span.
    (d,) = await bus.job_events("tr")
    assert d.seq == seq and d.headers["traceparent"].split("-")[1] == f"{trace_id:032x}"
    assert (
        trace.get_current_span(extract_context(d.headers)).get_span_context().trace_id == trace_id
    )

    # 2. A consumer's span for that event continues the same trace, as the producer's child,
    #    and what the handler appends in turn carries the trace on.
    stop = asyncio.Event()
    got: list[Delivered] = []

    async def handler(batch: list[Delivered]) -> None:
        await bus.append(
            MaintenanceChanged(event_id=new_event_id(), ts=2.0, state="ACTIVE", by="x")
        )
        got.extend(batch)
        stop.set()

    await asyncio.wait_for(
        bus.consume("tracer", handler, stop=stop, filter_subject=f"{bus.prefix}.job.>"), 10
    )
    consume = [s for s in spans.get_finished_spans() if s.name == "consume JobPromoted"]
    assert len(consume) == 1
    assert consume[0].context.trace_id == trace_id
    assert (
        consume[0].parent is not None
        and consume[0].parent.span_id == producer.get_span_context().span_id
    )
    follow_up = [x async for x in bus.replay(filter_subject=f"{bus.prefix}.maintenance")]
    assert follow_up[0].headers["traceparent"].split("-")[1] == f"{trace_id:032x}"


def test_inject_without_active_span_adds_nothing():
    assert inject_headers({"a": "b"}) == {"a": "b"}

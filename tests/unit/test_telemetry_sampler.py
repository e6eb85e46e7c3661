"""Without an exporter, spans are not recorded, yet W3C trace context still flows (SPEC E5)."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jpu.runtime.telemetry import _sampler, extract_context, inject_headers


def test_E5_no_exporter_records_nothing_but_propagates_the_trace():
    provider = TracerProvider(sampler=_sampler([]))  # not the global one: tests share it
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("gateway submit") as producer:
        headers = inject_headers({})
    assert not producer.is_recording()
    trace_id = producer.get_span_context().trace_id
    assert trace_id != 0 and headers["traceparent"].split("-")[1] == f"{trace_id:032x}"
    # the consumer continues the same trace, and carries it on to what it appends in turn
    with tracer.start_as_current_span("consume", context=extract_context(headers)) as consumer:
        follow_up = inject_headers({})
    assert consumer.get_span_context().trace_id == trace_id
    assert follow_up["traceparent"].split("-")[1] == f"{trace_id:032x}"


def test_E5_a_callers_sampled_trace_is_kept_as_the_caller_decided():
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=_sampler([]))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    sampled = {"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"}
    with provider.get_tracer("t").start_as_current_span("x", context=extract_context(sampled)):
        pass
    assert [s.context.trace_id for s in spans.get_finished_spans()] == [int("ab" * 16, 16)]


def test_an_exporter_keeps_the_sdk_default_sampler():
    assert _sampler([InMemorySpanExporter()]) is None

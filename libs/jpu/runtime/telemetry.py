"""OpenTelemetry at the edges (SPEC E5, O4): setup, tracers/meters, trace context in headers.

Exporters: console when JPU_OTEL_CONSOLE=1; OTLP when its package is installed (the `otlp`
extra) and OTEL_EXPORTER_OTLP_ENDPOINT is set; metrics (instruments in jpu.runtime.metrics) every
OTEL_METRIC_EXPORT_INTERVAL ms, default 15000; metrics always to Prometheus too, which scrapes
`/metrics` (jpu.runtime.metrics_endpoint: JPU_METRICS_PORT, and the gateway's own port). Otherwise
spans are not recorded at all (a sampler that samples nothing new: spans cost almost nothing) while
W3C trace context still flows through event headers (SPEC E5): trace ids are still created and
propagated, only not recorded. The pure core never imports this module.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from jpu.runtime.metrics_endpoint import prometheus_reader, serve_from_env

log = logging.getLogger(__name__)

# W3C traceparent/tracestate only: the wire format every service (and language) agrees on.
_propagator = TraceContextTextMapPropagator()
_configured = False
_exporting = False  # spans have somewhere to go (set once by setup_telemetry)


def spans_exported() -> bool:
    """Whether this process sends spans anywhere. Without an exporter a recorded span is dropped
    at its end, so a span whose only purpose is to be seen (an HTTP server span: its context goes
    nowhere else) need not be started at all."""
    return _exporting


def setup_telemetry(service_name: str) -> None:
    """Install the SDK tracer and meter providers once per process."""
    global _configured, _exporting
    if _configured:
        return
    _configured = True
    resource = Resource.create({"service.name": service_name})
    exporters = _span_exporters()
    _exporting = bool(exporters)
    provider = TracerProvider(resource=resource, sampler=_sampler(exporters))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    every_ms = float(os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", "15000"))
    readers: list[MetricReader] = [
        PeriodicExportingMetricReader(e, export_interval_millis=every_ms)
        for e in _metric_exporters()
    ]
    # Pulled as well as pushed: Prometheus scrapes `/metrics` (jpu.runtime.metrics_endpoint)
    readers.append(prometheus_reader())
    serve_from_env(os.environ)
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))


def _sampler(exporters: list[SpanExporter]) -> Sampler | None:
    """With nowhere to send spans, record none of our own: a root span gets a valid, unsampled
    context (its trace id still propagates, SPEC E5); a caller's sampled trace is kept as the
    caller decided. With an exporter: the SDK default (OTEL_TRACES_SAMPLER, else parent-based
    always-on)."""
    return None if exporters else ParentBased(ALWAYS_OFF)


def _console() -> bool:
    return os.environ.get("JPU_OTEL_CONSOLE") == "1"


def _otlp() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def _span_exporters() -> list[SpanExporter]:
    out: list[SpanExporter] = [ConsoleSpanExporter()] if _console() else []
    if _otlp():
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )

            out.append(OTLPSpanExporter())
        except ImportError:
            log.warning("OTEL_EXPORTER_OTLP_ENDPOINT set but the OTLP exporter is not installed")
    return out


def _metric_exporters() -> list[MetricExporter]:
    out: list[MetricExporter] = [ConsoleMetricExporter()] if _console() else []
    if _otlp():
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )

            out.append(OTLPMetricExporter())
        except ImportError:
            pass  # already warned for spans
    return out


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def meter(name: str) -> metrics.Meter:
    return metrics.get_meter(name)


def inject_headers(headers: dict[str, str], context: Context | None = None) -> dict[str, str]:
    """Add the current (or given) trace context as W3C `traceparent` to `headers`; returns it."""
    _propagator.inject(headers, context=context)
    return headers


def extract_context(headers: Mapping[str, Any] | None) -> Context:
    """The producer's trace context from message headers (empty context when absent)."""
    return _propagator.extract(dict(headers or {}))

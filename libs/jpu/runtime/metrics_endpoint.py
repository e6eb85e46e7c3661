"""SPEC O4: the metrics of jpu.runtime.metrics as Prometheus scrapes them — `/metrics`, beside OTLP.

The OpenTelemetry Prometheus exporter turns the SDK's instruments into prometheus_client's
default registry at scrape time (with the process_* / python_* collectors it already has). Where:

  * every service, when JPU_METRICS_PORT is set: its own listener on JPU_METRICS_HOST (default
    0.0.0.0) serving `/metrics` (the compose file and k8s/ set 9464, the exporter's usual port;
    the local stack gives each child its own free port, jpu.stack.metrics_targets);
  * the gateway, also on its API port (jpu_services.gateway.routes.metrics).

Names follow the exporter's rules: dots become underscores, the unit `s` adds `_seconds`, units
in braces (`{job}`) add nothing, counters end in `_total`. `exported_names()` derives them from
the instruments jpu.runtime.metrics creates, so a dashboard is checked against what the code
exports.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import Counter, Histogram
from opentelemetry.sdk.metrics import MeterProvider

from jpu.runtime import metrics

if TYPE_CHECKING:  # the exporter and prometheus_client load on first use (~25 ms: not for the CLI)
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

PORT_ENV, HOST_ENV = "JPU_METRICS_PORT", "JPU_METRICS_HOST"
DEFAULT_PORT = 9464  # the OpenTelemetry Prometheus exporter's customary port


def prometheus_reader(registry: CollectorRegistry | None = None) -> PrometheusMetricReader:
    """A metric reader that Prometheus pulls through `registry` (default: the process's)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import REGISTRY

    return PrometheusMetricReader(registry=REGISTRY if registry is None else registry)


def serve_from_env(env: Mapping[str, str]) -> int | None:
    """Serve `/metrics` on JPU_METRICS_PORT (a daemon thread); the port, or None when unset."""
    raw = env.get(PORT_ENV, "").strip()
    if not raw:
        return None
    from prometheus_client import start_http_server

    port, host = int(raw), env.get(HOST_ENV, "").strip() or "0.0.0.0"
    start_http_server(port, addr=host)
    log.info("metrics on http://%s:%d/metrics", host, port)
    return port


def render(registry: CollectorRegistry | None = None) -> tuple[bytes, str]:
    """The Prometheus text exposition of `registry` (default: the process's), its content type."""
    from prometheus_client import REGISTRY, generate_latest
    from prometheus_client.exposition import CONTENT_TYPE_LATEST

    return generate_latest(REGISTRY if registry is None else registry), CONTENT_TYPE_LATEST


def exported_names() -> set[str]:
    """Every sample name the services export for jpu.runtime.metrics' instruments, e.g.
    jpu_queue_length, jpu_dispatch_cycle_duration_seconds_bucket, jpu_dispatches_total: each
    instrument created on a scratch provider, given one value, and read back through the real
    exporter."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[prometheus_reader(registry)])
    try:
        metrics.use_meter_provider(provider)
        instruments: Any = metrics._instruments()
        for f in fields(instruments):
            instrument = getattr(instruments, f.name)
            if isinstance(instrument, Counter):
                instrument.add(1)
            elif isinstance(instrument, Histogram):
                instrument.record(0.0)
        with contextlib.ExitStack() as gauges:
            for g in metrics.GAUGES:
                gauges.enter_context(g.source(lambda: {"sample": 0.0}))
            text = generate_latest(registry).decode()
    finally:
        metrics.use_meter_provider(None)
        provider.shutdown()
    return {
        sample.name
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name != "target_info"
    }

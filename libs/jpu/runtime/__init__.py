"""The process plumbing every service holds (SPEC E4, E5, O4, O5): no domain, no entry points.

service.py    run_service / run_workers: JSON logs, signals, drain, the heartbeat file
edges.py      the two adapters: the event bus and the database pool, connected with backoff
resilience.py the one retry policy: a start or a worker waits out an outage, never exits on it
clock.py      injectable clocks (services read time only through one; the domain never does)
telemetry.py  OpenTelemetry setup, tracers, trace context in event headers (E5)
metrics.py    the O4 instruments and the one-line calls the services make
health.py     `python -m jpu.runtime.health`: the container health check
"""

"""SPEC O4: the compose deployment's Prometheus (compose/prometheus/prometheus.yml) is a valid
configuration to Debian's own `promtool`, and scrapes every service of compose/docker-compose.yml
that runs JPU-Share, on the port where that service serves /metrics."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from jpu.runtime.metrics_endpoint import DEFAULT_PORT, PORT_ENV
from jpu.testing.prometheus import prometheus_or_skip

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "compose" / "prometheus" / "prometheus.yml"
COMPOSE = ROOT / "compose" / "docker-compose.yml"


def jpu_services() -> dict[str, dict[str, Any]]:
    """The compose services that run a JPU-Share service (`python -m jpu_services.<name>`)."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    return {
        name: svc
        for name, svc in services.items()
        if any(str(part).startswith("jpu_services.") for part in svc.get("command", []))
    }


def scraped() -> dict[str, int]:
    """Each DNS name the configuration discovers → the port it scrapes there."""
    out = {}
    for job in yaml.safe_load(CONFIG.read_text())["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            assert sd["type"] == "A", job  # every copy of a service: one A record each
            out.update(dict.fromkeys(sd["names"], sd["port"]))
    return out


def test_O4_compose_prometheus_config_is_valid_to_promtool() -> None:
    prometheus = prometheus_or_skip()
    promtool = shutil.which("promtool") or str(Path(prometheus).with_name("promtool"))
    out = subprocess.run(
        [promtool, "check", "config", str(CONFIG)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_O4_alert_rules_are_valid_and_fire_on_their_faults() -> None:
    """Issue 34.7: promtool checks compose/prometheus/alerts.yml and runs its unit tests
    (alerts.test.yml): each alert fires on the fault it names and stays quiet otherwise."""
    prometheus = prometheus_or_skip()
    promtool = shutil.which("promtool") or str(Path(prometheus).with_name("promtool"))
    for args in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts.test.yml"]):
        out = subprocess.run(
            [promtool, *args], cwd=CONFIG.parent, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stdout + out.stderr


def test_O4_compose_prometheus_scrapes_every_service_where_it_serves_metrics() -> None:
    services, ports = jpu_services(), scraped()
    assert services.keys() == ports.keys(), set(services) ^ set(ports)
    for name, svc in services.items():
        env = svc.get("environment", {})
        if env.get(PORT_ENV):  # a worker: its own metrics listener
            assert ports[name] == int(env[PORT_ENV]) == DEFAULT_PORT, name
        else:  # only a gateway has none: /metrics on its API port
            assert svc["command"][-1] == "jpu_services.gateway", name
            assert ports[name] == int(env.get("JPU_GATEWAY_PORT", 8080)), name
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    assert "prometheus" in compose and "prometheus:/prometheus" in compose["prometheus"]["volumes"]

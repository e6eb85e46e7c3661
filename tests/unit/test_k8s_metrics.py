"""SPEC O4 on Kubernetes: every JPU-Share pod says where Prometheus scrapes it (the
prometheus.io/* annotations a pod-discovery scrape config keeps), and that is where the pod's
service serves /metrics: a worker's JPU_METRICS_PORT, the gateway's API port."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from jpu.runtime.metrics_endpoint import PORT_ENV

K8S = Path(__file__).resolve().parents[2] / "k8s"


def jpu_workloads() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d and d["kind"] in {"Deployment", "StatefulSet"}:
                (c,) = d["spec"]["template"]["spec"]["containers"]
                if any(str(part).startswith("jpu_services.") for part in c.get("command", [])):
                    out[d["metadata"]["name"]] = d
    return out


def test_O4_k8s_every_service_pod_is_annotated_where_it_serves_metrics() -> None:
    workloads = jpu_workloads()
    assert {"gateway", "projector", "dispatcher", "intake", "slurm-agent"} <= workloads.keys()
    for name, w in workloads.items():
        template = w["spec"]["template"]
        notes = template["metadata"].get("annotations", {})
        assert notes.get("prometheus.io/scrape") == "true", name
        assert notes.get("prometheus.io/path") == "/metrics", name
        port = int(notes["prometheus.io/port"])
        (c,) = template["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        assert port in {p["containerPort"] for p in c.get("ports", [])}, name
        if c["command"][-1] == "jpu_services.gateway":
            assert PORT_ENV not in env, name  # /metrics on its API port
        else:
            assert env.get(PORT_ENV) == str(port), name

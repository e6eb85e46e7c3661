"""k8s/ checked offline against the Kubernetes API schemas (kubernetes-validate ships them), and
for what the deployment relies on (SPEC O3, O4): probes on the gateway's /healthz and /readyz,
resource requests on every container, a PodDisruptionBudget for every leader + standby pair and
for the NATS quorum, and every file listed in the kustomization."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "k8s"
KUBERNETES = "1.30.0"  # a version still in support that the manifests must fit


def documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def workloads() -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d
        for _, d in documents()
        if d["kind"] in {"Deployment", "StatefulSet"}
    }


@pytest.mark.parametrize(
    ("name", "doc"), documents(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_k8s_manifest_valid_against_the_schema_O3(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises naming the field


def test_k8s_kustomization_lists_every_manifest_O3() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def test_k8s_gateway_probes_healthz_and_readyz_O4() -> None:
    for name in ("gateway", "projector"):
        (c,) = workloads()[name]["spec"]["template"]["spec"]["containers"]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", name
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", name


def test_k8s_every_container_requests_cpu_and_memory_and_is_probed_O4() -> None:
    for name, w in workloads().items():
        for c in w["spec"]["template"]["spec"]["containers"]:
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), name
            assert "livenessProbe" in c and "readinessProbe" in c, name


def test_k8s_disruption_budgets_keep_one_of_each_pair_and_the_nats_quorum_E4() -> None:
    budgets = {
        d["spec"]["selector"]["matchLabels"]["app"]: d["spec"]
        for _, d in documents()
        if d["kind"] == "PodDisruptionBudget"
    }
    pairs = {n for n, w in workloads().items() if w["spec"]["replicas"] == 2}
    assert {"dispatcher", "backfill", "gateway", "intake"} <= pairs
    for app in pairs:
        assert budgets[app] == {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}
    assert workloads()["nats"]["spec"]["replicas"] == 3
    assert budgets["nats"]["maxUnavailable"] == 1  # two of three keep JetStream's quorum

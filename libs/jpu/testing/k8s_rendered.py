"""k8s/ as a cluster would receive it: `kubectl kustomize k8s/` (the namespace and the site's
`images:` applied), parsed. No API server runs on this machine kind, so this is what the tests
read. kubectl is a system package of this machine kind; a missing one fails the tests that need it
(they check what would be deployed) rather than skipping them."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]  # the checkout (libs/jpu/testing/ here)
K8S = ROOT / "k8s"
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "Job"}


@functools.cache
def _rendered_text(directory: Path) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render k8s/ (`kubectl kustomize`), as a site would"
    done = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def rendered(directory: Path = K8S) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(_rendered_text(directory)) if d]


def workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every Deployment / StatefulSet / Job by name (names are unique across the kinds)."""
    out = {d["metadata"]["name"]: d for d in docs if d["kind"] in WORKLOAD_KINDS}
    assert len(out) == sum(d["kind"] in WORKLOAD_KINDS for d in docs), "a workload name twice"
    return out


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def config_maps(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}


def env_names(container: dict[str, Any], docs: list[dict[str, Any]]) -> set[str]:
    """The names of the variables a container gets from its manifest: `env` and the keys of
    every ConfigMap in `envFrom` (a Secret's keys are the site's: see `secret_env_refs`)."""
    maps = config_maps(docs)
    names = {e["name"] for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            names |= set(maps[source["configMapRef"]["name"]])
    return names


def env_values(container: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, str]:
    """Literal values (ConfigMap keys and `value:`), for what is not a secret."""
    maps = config_maps(docs)
    values: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            values |= maps[source["configMapRef"]["name"]]
    for e in container.get("env", []):
        if "value" in e:
            values[e["name"]] = e["value"]
    return values


def secret_env_refs(container: dict[str, Any]) -> set[str]:
    """Names of Secrets whose every key becomes a variable (`envFrom: secretRef`)."""
    return {s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s}

"""compose/ and k8s/ describe a clustered deployment (SPEC O3): every service, probes, replicas."""

from __future__ import annotations

from pathlib import Path

import yaml

from jpu.config import load_config
from jpu.stack.supervisor import SERVICES  # every supervised service is deployed too

ROOT = Path(__file__).resolve().parents[2]


def k8s_docs() -> list[dict]:
    docs = []
    for path in sorted((ROOT / "k8s").glob("*.yaml")):
        if path.name == "kustomization.yaml":  # not a Kubernetes object
            continue
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def test_O3_compose_and_k8s_manifests_parse() -> None:
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    services = compose["services"]
    for name in SERVICES:
        svc = services[name.replace("_", "-")]  # compose names: DNS names, no underscores
        assert svc["command"] == ["python", "-m", f"jpu_services.{name}"]
        assert "JPU_NATS_URL" in svc["environment"] and "JPU_DATABASE_URL" in svc["environment"]
    # one health check for every service, the image's (podman runs it; `scripts/cluster` waits
    # on it): a worker's heartbeat, or the gateway's /readyz
    image = (ROOT / "compose" / "images" / "service.Containerfile").read_text()
    assert "HEALTHCHECK" in image and "jpu.runtime.health" in image
    assert services["gateway"]["environment"]["JPU_HEALTH_URL"].endswith("/readyz?degraded=ok")
    assert services["dispatcher"]["deploy"]["replicas"] == 2
    nats = [n for n in services if n.startswith("nats-")]
    assert len(nats) == 3 and all("-js" in services[n]["command"] for n in nats)
    assert services["gateway"]["environment"]["JPU_STREAM_REPLICAS"] == "3"
    load_config(ROOT / "compose" / "config.yaml", env={})  # the mounted config is valid


def test_O3_k8s_every_service_has_probes_and_replicas() -> None:
    docs = k8s_docs()
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    for name in SERVICES:
        dep = deployments[name.replace("_", "-")]
        [container] = dep["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["python", "-m", f"jpu_services.{name}"]
        assert container["livenessProbe"] and container["readinessProbe"], name
        assert dep["spec"]["replicas"] >= 1
    gw = deployments["gateway"]["spec"]["template"]["spec"]["containers"][0]
    assert gw["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gw["readinessProbe"]["httpGet"]["path"] == "/readyz?degraded=ok"
    assert deployments["dispatcher"]["spec"]["replicas"] == 2  # leader + standby (SPEC E4)

    [nats] = [d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "nats"]
    assert nats["spec"]["replicas"] == 3
    conf = next(d for d in docs if d["metadata"]["name"] == "nats-config")["data"]["nats.conf"]
    assert "jetstream" in conf and conf.count("nats://nats-") == 3
    env = next(d for d in docs if d["metadata"]["name"] == "jpu-env")["data"]
    assert env["JPU_STREAM_REPLICAS"] == "3"
    assert env["JPU_NATS_URL"].count("nats://") == 3
    config_map = next(d for d in docs if d["metadata"]["name"] == "jpu-config")
    cluster = yaml.safe_load(config_map["data"]["config.yaml"])
    assert {t["name"] for t in cluster["tiers"]} == {"rtx4090", "rtx3080ti"}
    kustomization = yaml.safe_load((ROOT / "k8s" / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in (ROOT / "k8s").glob("*.yaml")} - {"kustomization.yaml"}


def _mounts(container: dict) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}


def test_U5_agent_and_gateway_share_the_job_output_storage() -> None:
    """The agent writes each attempt's output under JPU_OUTPUT_ROOT and the gateway serves it
    (`jpu logs`): both must mount one storage at that path, in compose and in k8s."""
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    services = compose["services"]
    root = services["gateway"]["environment"]["JPU_OUTPUT_ROOT"]
    for name in ("gateway", "slurm-agent"):
        svc = services[name]
        assert svc["environment"]["JPU_OUTPUT_ROOT"] == root, name
        assert f"outputs:{root}" in svc["volumes"], name
    assert "outputs" in compose["volumes"]

    docs = k8s_docs()
    env = next(d for d in docs if d["metadata"]["name"] == "jpu-env")["data"]
    root = env["JPU_OUTPUT_ROOT"]
    [pvc] = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]  # agent and gateways on other nodes
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    for name in ("gateway", "slurm-agent"):
        pod = deployments[name]["spec"]["template"]["spec"]
        [container] = pod["containers"]
        assert _mounts(container).get("outputs") == root, name
        vol = next(v for v in pod["volumes"] if v["name"] == "outputs")
        assert vol["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"], name
    kustomization = yaml.safe_load((ROOT / "k8s" / "kustomization.yaml").read_text())
    assert "outputs.yaml" in kustomization["resources"]


def test_O5_every_container_restarts_and_its_log_is_capped() -> None:
    """No container stays stopped (a service that ends for any reason the in-process retry
    does not cover is restarted by the engine), and none fills the disk with its output."""
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    wrong = []
    for name, svc in compose["services"].items():
        if svc.get("restart") not in ("unless-stopped", "always", "on-failure"):
            wrong.append(f"{name}: restart {svc.get('restart')!r}")
        opts = (svc.get("logging") or {}).get("options") or {}
        if svc.get("logging", {}).get("driver") != "json-file" or not opts.get("max-size"):
            wrong.append(f"{name}: logging {svc.get('logging')!r}")
    assert not wrong, wrong
    # Kubernetes: long-running pods restart always (the default); the one-shot Job on failure
    for d in k8s_docs():
        if d["kind"] in ("Deployment", "StatefulSet"):
            policy = d["spec"]["template"]["spec"].get("restartPolicy", "Always")
            assert policy == "Always", (d["metadata"]["name"], policy)
        if d["kind"] == "Job":
            assert d["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
            assert d["spec"]["backoffLimit"] >= 10, d["metadata"]["name"]

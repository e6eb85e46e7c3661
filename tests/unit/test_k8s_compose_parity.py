"""compose/docker-compose.yml and k8s/ (as `kubectl kustomize` renders it) describe one deployment
(SPEC O3): the same services, ports, environment variable names and replica counts, so neither can
drift from the other. Values may differ where they are addresses (a compose service name vs a
StatefulSet pod's DNS name) or secrets (compose's `${VAR}` vs a Secret). What legitimately differs
is listed below, each with its mapping rule, and the rule itself is checked."""

from __future__ import annotations

import re
from typing import Any

import yaml

from jpu.bus import permissions
from jpu.testing.k8s_rendered import (
    ROOT,
    env_names,
    env_values,
    pod_spec,
    rendered,
    secret_env_refs,
    workloads,
)
from jpu.tools.nats_auth import env_name

COMPOSE = yaml.safe_load((ROOT / "compose/docker-compose.yml").read_text())["services"]
NATS_NODES = sorted(n for n in COMPOSE if re.fullmatch(r"nats-\d+", n))

# Compose services with no workload of their own in k8s, and why:
NO_WORKLOAD = {
    # HAProxy in front of the gateways; in k8s the Ingress (ingress.yaml) and the gateway Service
    # are that one address: test_the_front_is_the_ingress_in_k8s
    "front": "Ingress",
    # compose ships a Prometheus; on Kubernetes the site's scrapes the pods where their
    # prometheus.io/* annotations say (tests/unit/test_k8s_metrics.py)
    "prometheus": None,
}
# Variables set on one side only, and why (the rule is checked in the test named):
ONLY_IN_COMPOSE = {
    # read only by the image's HEALTHCHECK, which Kubernetes does not run: k8s probes the same
    # URL with httpGet (test_health_url_is_the_k8s_readiness_probe)
    "JPU_HEALTH_URL",
}
ONLY_IN_K8S = {
    # NATS's server_name from the pod's name (nats.conf); compose names each server with `-n`
    # (test_nats_servers_are_named_and_routed_alike)
    "POD_NAME",
    # the official postgres image's initdb options; compose's jpu-postgres entrypoint passes the
    # same ones itself (test_postgres_initialises_with_scram_on_both)
    "POSTGRES_INITDB_ARGS",
}
# Variables whose values are addresses or secrets: names compared, values not.
ADDRESSES_AND_SECRETS = {
    "JPU_NATS_URL",
    "JPU_DATABASE_URL",
    "JPU_NATS_PASSWORD",
    "POSTGRES_PASSWORD",
    "JPU_APP_PASSWORD",
} | {env_name(u) for u in (permissions.ADMIN, *permissions.SERVICES)}


def k8s_name(compose_name: str) -> str | None:
    if compose_name in NATS_NODES:
        return "nats"  # one StatefulSet of len(NATS_NODES) replicas
    if compose_name in NO_WORKLOAD:
        return None
    return compose_name  # the same name: DNS names, no underscores, on both


def image_env(service: dict[str, Any]) -> set[str]:
    """ENV names the service's image sets (compose/images/*.Containerfile); the same image runs
    under k8s, so they count on both sides."""
    image = str(service.get("image", ""))
    for stem in ("service", "postgres", "nats"):
        marker = {"service": "jpu-share", "postgres": "jpu-postgres", "nats": "jpu-nats"}[stem]
        if marker in image:
            text = (ROOT / f"compose/images/{stem}.Containerfile").read_text()
            block = re.findall(r"^ENV ((?:.*\\\n)*.*)$", text, re.M)
            return {m for b in block for m in re.findall(r"([A-Z_][A-Z0-9_]*)=", b)}
    raise AssertionError(f"which Containerfile builds {image}?")


def compose_env(name: str) -> dict[str, str]:
    """Set variables (an empty value is unset: the services read "" as not given)."""
    env = COMPOSE[name].get("environment", {})
    return {k: str(v) for k, v in env.items() if str(v) != ""}


def k8s_container(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (c,) = pod_spec(workloads(docs)[name])["containers"]
    return c


def k8s_env(docs: list[dict[str, Any]], name: str) -> set[str]:
    c = k8s_container(docs, name)
    names = env_names(c, docs)
    for secret in secret_env_refs(c):
        # a Secret's keys are the site's; jpu-nats is what `nats_auth env` generates
        assert secret == "jpu-nats", secret
        names |= {env_name(u) for u in (permissions.ADMIN, *permissions.SERVICES)}
    return names


def test_compose_and_k8s_describe_the_same_services_O3() -> None:
    docs = rendered()
    mapped = {k8s_name(n) for n in COMPOSE} - {None}
    assert mapped == set(workloads(docs))
    assert workloads(docs)["prepare"]["kind"] == "Job"  # compose's one-shot
    assert workloads(docs)["nats"]["kind"] == "StatefulSet"


def test_compose_and_k8s_give_each_service_the_same_environment_names_O3() -> None:
    docs = rendered()
    for name, service in COMPOSE.items():
        target = k8s_name(name)
        if target is None:
            continue
        ours = set(compose_env(name)) | image_env(service)
        theirs = k8s_env(docs, target) | image_env(service)
        assert ours - theirs <= ONLY_IN_COMPOSE, (name, ours - theirs)
        assert theirs - ours <= ONLY_IN_K8S, (name, theirs - ours)


def test_compose_and_k8s_give_the_same_values_where_not_addresses_or_secrets_O3() -> None:
    docs = rendered()
    for name in COMPOSE:
        target = k8s_name(name)
        if target is None:
            continue
        ours = compose_env(name)
        theirs = env_values(k8s_container(docs, target), docs)
        for key in (set(ours) & set(theirs)) - ADDRESSES_AND_SECRETS:
            assert ours[key] == theirs[key], (name, key, ours[key], theirs[key])


def _compose_ports(name: str) -> set[int]:
    service, env = COMPOSE[name], compose_env(name)
    command = service.get("command") or []
    if name in NATS_NODES:
        cluster = command[command.index("--cluster") + 1]
        client = int(command[command.index("-p") + 1]) if "-p" in command else 4222
        return {client, int(command[command.index("-m") + 1]), int(cluster.rsplit(":", 1)[1])}
    if name == "postgres":
        port = re.search(r"@postgres:(\d+)/", COMPOSE["gateway"]["environment"]["JPU_DATABASE_URL"])
        assert port
        return {int(port.group(1))}
    ports = set()
    if command[-1:] == ["jpu_services.gateway"]:  # the API (and /metrics on it)
        ports.add(int(env["JPU_GATEWAY_PORT"]))
    if "JPU_METRICS_PORT" in env:
        ports.add(int(env["JPU_METRICS_PORT"]))
    return ports


def test_compose_and_k8s_serve_the_same_ports_O3() -> None:
    docs = rendered()
    for name in COMPOSE:
        target = k8s_name(name)
        if target is None:
            continue
        declared = {p["containerPort"] for p in k8s_container(docs, target).get("ports", [])}
        assert _compose_ports(name) == declared, (name, _compose_ports(name), declared)
    # the clients dial those ports on both: NATS on 4222, PostgreSQL on 5432
    k8s_nats = env_values(k8s_container(docs, "gateway"), docs)["JPU_NATS_URL"]
    compose_nats = COMPOSE["gateway"]["environment"]["JPU_NATS_URL"]
    assert set(re.findall(r":(\d+)", k8s_nats)) == set(re.findall(r":(\d+)", compose_nats))


def test_compose_and_k8s_run_the_same_replica_counts_O3() -> None:
    docs = rendered()
    ws = workloads(docs)
    assert ws["nats"]["spec"]["replicas"] == len(NATS_NODES) == 3
    for name, service in COMPOSE.items():
        target = k8s_name(name)
        if target is None or name in NATS_NODES:
            continue
        w = ws[target]
        if w["kind"] == "Job":
            assert w["spec"].get("completions", 1) == 1 and w["spec"].get("parallelism", 1) == 1
            continue
        compose_replicas = service.get("deploy", {}).get("replicas", 1)
        assert w["spec"]["replicas"] == compose_replicas, name


def test_the_front_is_the_ingress_in_k8s() -> None:
    """compose's HAProxy sends every request to `gateway:<port>`; k8s's Ingress to the gateway
    Service, whose target is the gateway pods' same port."""
    docs = rendered()
    cfg = (ROOT / "compose/haproxy.cfg").read_text()
    (backend,) = re.findall(r"^\s*server-template \S+ \d+ (\S+):(\d+)", cfg, re.M)
    (ingress,) = [d for d in docs if d["kind"] == "Ingress"]
    (svc,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == backend[0]]
    paths = [p for r in ingress["spec"]["rules"] for p in r["http"]["paths"]]
    assert {p["backend"]["service"]["name"] for p in paths} == {backend[0]}
    (port,) = svc["spec"]["ports"]
    named = {p["name"]: p["containerPort"] for p in k8s_container(docs, "gateway")["ports"]}
    assert named[port["targetPort"]] == int(backend[1])


def test_health_url_is_the_k8s_readiness_probe() -> None:
    docs = rendered()
    for name in ("gateway", "projector"):
        url = COMPOSE[name]["environment"]["JPU_HEALTH_URL"]
        port, path = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/\S+)", url).groups()  # type: ignore[union-attr]
        c = k8s_container(docs, name)
        probe = c["readinessProbe"]["httpGet"]
        named = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert probe["path"] == path and named[probe["port"]] == int(port), name


def test_nats_servers_are_named_and_routed_alike() -> None:
    docs = rendered()
    conf = next(d for d in docs if d["metadata"]["name"] == "nats-config")["data"]["nats.conf"]
    assert "server_name: $POD_NAME" in conf
    (c,) = pod_spec(workloads(docs)["nats"])["containers"]
    (pod_name,) = [e for e in c["env"] if e["name"] == "POD_NAME"]
    assert pod_name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    for node in NATS_NODES:
        command = COMPOSE[node]["command"]
        assert command[command.index("-n") + 1] == node
        assert command[command.index("--cluster_name") + 1] == "jpu"
    assert re.search(r"cluster \{\s*name: jpu\b", conf)
    assert conf.count("nats://nats-") == len(NATS_NODES)  # every node routes to every other


def test_postgres_initialises_with_scram_on_both() -> None:
    docs = rendered()
    (c,) = pod_spec(workloads(docs)["postgres"])["containers"]
    args = next(e["value"] for e in c["env"] if e["name"] == "POSTGRES_INITDB_ARGS")
    entrypoint = (ROOT / "compose/images/postgres-entrypoint.sh").read_text()
    for arg in args.split():
        assert arg in entrypoint, arg

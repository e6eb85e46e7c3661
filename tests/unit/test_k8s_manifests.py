"""k8s/ as `kubectl kustomize k8s/` renders it (what a site applies; no API server runs here),
checked offline against the Kubernetes API schemas (kubernetes-validate ships them) and for what a
deployment relies on: probes on the gateway's /healthz and /readyz, resource requests, a
PodDisruptionBudget for every leader + standby pair and for the NATS quorum (SPEC O3, O4, E4); the
site's images named in one place; every pod restricted (non-root, read-only root, no privilege
escalation, no capabilities, RuntimeDefault seccomp); TLS at the Ingress; NetworkPolicies that
allow exactly what each service needs; no secret in the repository (SPEC SEC2)."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from jpu.testing.k8s_rendered import (
    K8S,
    ROOT,
    env_names,
    env_values,
    pod_spec,
    rendered,
    workloads,
)

KUBERNETES = "1.30.0"  # a version still in support that the manifests must fit
NAMESPACE = "jpu-share"


def documents() -> list[dict[str, Any]]:
    return rendered()


def _containers(w: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(w)
    return [*spec.get("initContainers", []), *spec["containers"]]


def _doc_id(doc: Any) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}" if isinstance(doc, dict) else ""


@pytest.mark.parametrize("doc", documents(), ids=_doc_id)
def test_k8s_manifest_valid_against_the_schema_O3(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises naming the field


def test_k8s_kustomization_lists_every_manifest_O3() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def test_k8s_gateway_probes_healthz_and_readyz_O4() -> None:
    for name in ("gateway", "projector"):
        (c,) = pod_spec(workloads(documents())[name])["containers"]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", name
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz?degraded=ok", name


def test_k8s_every_container_requests_cpu_and_memory_and_is_probed_O4() -> None:
    for name, w in workloads(documents()).items():
        for c in _containers(w):
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), name
            if w["kind"] != "Job":  # a one-shot is not probed: it ends
                assert "livenessProbe" in c and "readinessProbe" in c, name


def test_k8s_disruption_budgets_keep_one_of_each_pair_and_the_nats_quorum_E4() -> None:
    docs = documents()
    budgets = {
        d["spec"]["selector"]["matchLabels"]["app"]: d["spec"]
        for d in docs
        if d["kind"] == "PodDisruptionBudget"
    }
    ws = workloads(docs)
    pairs = {n for n, w in ws.items() if w["kind"] == "Deployment" and w["spec"]["replicas"] == 2}
    assert {"dispatcher", "backfill", "gateway", "intake"} <= pairs
    for app in pairs:
        assert budgets[app] == {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}
    assert ws["nats"]["spec"]["replicas"] == 3
    assert budgets["nats"]["maxUnavailable"] == 1  # two of three keep JetStream's quorum


# --- images: one place -------------------------------------------------------------------------


def _raw_workload_images() -> set[str]:
    images = set()
    for path in sorted(K8S.glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d and d.get("kind") in {"Deployment", "StatefulSet", "Job"}:
                images |= {c["image"] for c in _containers(d)}
    return images


def test_k8s_images_are_named_in_one_place_by_kustomize_images() -> None:
    """The manifests say a placeholder (no registry, no tag); kustomization.yaml's `images:` is
    where a site gives each its registry and a pinned tag, and every rendered container runs one
    of those."""
    entries = yaml.safe_load((K8S / "kustomization.yaml").read_text())["images"]
    by_name = {e["name"]: e for e in entries}
    placeholders = _raw_workload_images()
    assert placeholders == set(by_name), "every placeholder has one entry, and no stray entry"
    for name in placeholders:
        assert re.fullmatch(r"[a-z0-9-]+", name), f"{name}: a placeholder, not a reference"
        tag = str(by_name[name].get("newTag", ""))
        assert (tag and tag != "latest") or "digest" in by_name[name], f"{name}: pin a tag"
    want = {f"{e['newName']}:{e['newTag']}" for e in entries}
    for name, w in workloads(documents()).items():
        for c in _containers(w):
            assert c["image"] in want, (name, c["image"])


# --- securityContext: every pod, every container -----------------------------------------------


def _security(w: dict[str, Any], c: dict[str, Any], key: str) -> Any:
    """A container's setting, else its pod's (Kubernetes: the container's wins)."""
    return c.get("securityContext", {}).get(key, pod_spec(w).get("securityContext", {}).get(key))


def test_k8s_every_pod_runs_as_non_root() -> None:
    for name, w in workloads(documents()).items():
        for c in _containers(w):
            assert _security(w, c, "runAsNonRoot") is True, name
            uid = _security(w, c, "runAsUser")
            # a numeric uid: the kubelet cannot check a named USER (the service image's `jpu`)
            assert isinstance(uid, int) and uid > 0, name


def _writable_volumes(w: dict[str, Any]) -> set[str]:
    names = {v["name"] for v in pod_spec(w).get("volumes", []) if "emptyDir" in v}
    names |= {v["name"] for v in pod_spec(w).get("volumes", []) if "persistentVolumeClaim" in v}
    names |= {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
    return names


def _writes(w: dict[str, Any], c: dict[str, Any], docs: list[dict[str, Any]]) -> set[str]:
    """Where a container writes, from what configures it: a JPU-Share process its /tmp, a
    service its heartbeat's directory, the image's WORKDIR (data_dir `.jpu` is relative to it:
    workspace build scratch) and JPU_OUTPUT_ROOT where it mounts the outputs; PostgreSQL its
    data, socket and /tmp; NATS its JetStream store_dir."""
    env = env_values(c, docs)
    if c.get("command", [None])[0] == "python":
        containerfile = (ROOT / "compose/images/service.Containerfile").read_text()
        (workdir,) = re.findall(r"^WORKDIR (\S+)", containerfile, re.M)
        out = {"/tmp", workdir}
        if w["kind"] != "Job":  # a service touches its heartbeat (the probes); a one-shot not
            out.add(os.path.dirname(env["JPU_HEARTBEAT_FILE"]))
        mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
        return out | ({env["JPU_OUTPUT_ROOT"]} & mounts)
    if c["name"] == "postgres":
        return {os.path.dirname(env["PGDATA"]), "/var/run/postgresql", "/tmp"}
    if c["name"] == "nats":
        conf = next(d for d in docs if d["metadata"]["name"] == "nats-config")
        (store,) = re.findall(r"store_dir:\s*(\S+)", conf["data"]["nats.conf"])
        return {store}
    raise AssertionError(f"{c['name']}: where does it write? (add it here)")


def test_k8s_every_container_has_a_read_only_root_with_a_volume_where_it_writes() -> None:
    docs = documents()
    for name, w in workloads(docs).items():
        writable = _writable_volumes(w)
        for c in _containers(w):
            assert _security(w, c, "readOnlyRootFilesystem") is True, name
            mounted = {
                m["mountPath"]: m["name"]
                for m in c.get("volumeMounts", [])
                if not m.get("readOnly") and m["name"] in writable
            }
            for path in _writes(w, c, docs):
                assert path in mounted, f"{name} writes {path}: mount an emptyDir there"


def test_k8s_no_container_may_escalate_privileges() -> None:
    for name, w in workloads(documents()).items():
        for c in _containers(w):
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert not c["securityContext"].get("privileged", False), name


def test_k8s_every_container_drops_all_capabilities() -> None:
    for name, w in workloads(documents()).items():
        for c in _containers(w):
            caps = c["securityContext"]["capabilities"]
            assert caps["drop"] == ["ALL"] and not caps.get("add"), name


def test_k8s_every_pod_uses_the_runtime_default_seccomp_profile() -> None:
    for name, w in workloads(documents()).items():
        for c in _containers(w):
            assert _security(w, c, "seccompProfile") == {"type": "RuntimeDefault"}, name
        spec = pod_spec(w)
        assert spec.get("automountServiceAccountToken") is False, name  # no API client here
        assert not (spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC")), name


# --- Ingress --------------------------------------------------------------------------------


def test_k8s_ingress_serves_the_gateways_over_tls_with_the_sites_secret() -> None:
    docs = documents()
    (ingress,) = [d for d in docs if d["kind"] == "Ingress"]
    (tls,) = ingress["spec"]["tls"]
    assert tls["secretName"], "the site's certificate Secret"
    assert not [d for d in docs if d["kind"] == "Secret"], "the certificate is not committed"
    hosts = {r["host"] for r in ingress["spec"]["rules"]}
    assert hosts == set(tls["hosts"]), "every host served is covered by the certificate"
    backends = {
        p["backend"]["service"]["name"]
        for r in ingress["spec"]["rules"]
        for p in r["http"]["paths"]
    }
    assert backends == {"gateway"}
    (svc,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "gateway"]
    assert svc["spec"]["selector"] == {"app": "gateway"}  # the API, not the projector


# --- NetworkPolicies: a small evaluator of the Kubernetes semantics ------------------------------
# A pod is (namespace, labels, ip); an address outside the cluster is (None, None, ip). A
# connection is allowed when the source's egress and the destination's ingress both allow it; a
# side no policy selects (for that direction) allows everything (the NetworkPolicy API).

Peer = tuple[str | None, dict[str, str] | None, str]
NS_LABEL = "kubernetes.io/metadata.name"
OUTSIDE: Peer = (None, None, "198.51.100.7")  # a site's SMTP relay, Slurm controller, index
INGRESS_CONTROLLER: Peer = (
    "ingress-nginx",
    {"app.kubernetes.io/name": "ingress-nginx"},
    "10.244.9.1",
)
PROMETHEUS: Peer = ("monitoring", {"app.kubernetes.io/name": "prometheus"}, "10.244.9.2")
KUBE_DNS: Peer = ("kube-system", {"k8s-app": "kube-dns"}, "10.244.9.3")
STRANGER: Peer = ("other", {"app": "gateway"}, "10.244.9.4")  # same labels, another namespace
PORTS = [
    (53, "UDP"),
    *[
        (p, "TCP")
        for p in (25, 53, 80, 443, 465, 587, 4222, 5432, 6222, 6817, 6819, 8080, 8222, 9464)
    ],
]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        value, op = labels.get(e["key"]), e["operator"]
        if op == "In" and value not in e["values"]:
            return False
        if op == "NotIn" and value in e["values"]:
            return False
        if (op == "Exists") != (value is not None) and op in {"Exists", "DoesNotExist"}:
            return False
    return True


def _peer_matches(rule_peer: dict[str, Any], policy_ns: str, peer: Peer) -> bool:
    ns, labels, ip = peer
    if "ipBlock" in rule_peer:
        block = rule_peer["ipBlock"]
        addr = ipaddress.ip_address(ip)
        return addr in ipaddress.ip_network(block["cidr"]) and not any(
            addr in ipaddress.ip_network(x) for x in block.get("except", [])
        )
    if labels is None:
        return False
    if "namespaceSelector" in rule_peer:
        if not _selects(rule_peer["namespaceSelector"], {NS_LABEL: str(ns)}):
            return False
    elif ns != policy_ns:
        return False
    return _selects(rule_peer.get("podSelector", {}), labels)


def _allows(
    policies: list[dict[str, Any]], direction: str, me: Peer, other: Peer, port: tuple[int, str]
) -> bool:
    ns, labels, _ = me
    if labels is None:
        return True  # outside the cluster: not ours to filter
    kind = "Ingress" if direction == "ingress" else "Egress"
    mine = [
        p
        for p in policies
        if p["metadata"]["namespace"] == ns
        and kind in p["spec"]["policyTypes"]
        and _selects(p["spec"]["podSelector"], labels)
    ]
    if not mine:
        return True
    side = "from" if direction == "ingress" else "to"
    for p in mine:
        for rule in p["spec"].get(direction, []):
            ports = rule.get("ports")
            if ports is not None and not any(
                (x["port"], x.get("protocol", "TCP")) == port for x in ports
            ):
                continue
            peers = rule.get(side)
            if peers is None or any(_peer_matches(r, ns, other) for r in peers):
                return True
    return False


def _pods(docs: list[dict[str, Any]]) -> dict[str, Peer]:
    return {
        name: (NAMESPACE, w["spec"]["template"]["metadata"]["labels"], f"10.244.0.{i}")
        for i, (name, w) in enumerate(sorted(workloads(docs).items()), start=10)
    }


def _needs(docs: list[dict[str, Any]]) -> set[tuple[str, str, tuple[int, str]]]:
    """What each component needs, from what configures it (names of _pods() or of the peers)."""
    ws = workloads(docs)
    need: set[tuple[str, str, tuple[int, str]]] = set()
    for name, w in ws.items():
        need |= {(name, "kube-dns", (53, proto)) for proto in ("UDP", "TCP")}
        for c in pod_spec(w)["containers"]:
            env = env_names(c, docs)
            if "JPU_NATS_URL" in env:  # jpu.runtime.edges.connect_edges: the bus ...
                need.add((name, "nats", (4222, "TCP")))
            if "JPU_DATABASE_URL" in env:  # ... and the pool, every JPU-Share process
                need.add((name, "postgres", (5432, "TCP")))
        notes = w["spec"]["template"]["metadata"].get("annotations", {})
        if notes.get("prometheus.io/scrape") == "true":  # SPEC O4
            need.add(("prometheus", name, (int(notes["prometheus.io/port"]), "TCP")))
    need.add(("nats", "nats", (6222, "TCP")))  # cluster routes (JetStream's Raft)
    # the Ingress's backend: the gateway Service's target port on the gateway pods
    (gw,) = pod_spec(ws["gateway"])["containers"]
    need.add(("ingress-controller", "gateway", (gw["ports"][0]["containerPort"], "TCP")))
    # SPEC Q10: SMTP relay and webhooks; the Slurm controller/dbd and the package index
    need |= {("notifier", "outside", (p, "TCP")) for p in (25, 465, 587, 80, 443)}
    need |= {("slurm-agent", "outside", (p, "TCP")) for p in (6817, 6819, 80, 443)}
    return need


def _policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def test_k8s_network_policies_deny_by_default() -> None:
    docs = documents()
    deny = [
        p
        for p in _policies(docs)
        if p["spec"]["podSelector"] == {}
        and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
    ]
    assert len(deny) == 1, "one default-deny for every pod, both directions"
    # and so every pod is selected for both directions: nothing is open by omission
    for name, pod in _pods(docs).items():
        for kind in ("Ingress", "Egress"):
            assert any(
                kind in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], pod[1])
                for p in _policies(docs)
            ), (name, kind)


def test_k8s_network_policies_allow_exactly_what_each_service_needs() -> None:
    docs = documents()
    policies = _policies(docs)
    peers: dict[str, Peer] = {
        **_pods(docs),
        "ingress-controller": INGRESS_CONTROLLER,
        "prometheus": PROMETHEUS,
        "kube-dns": KUBE_DNS,
        "outside": OUTSIDE,
        "stranger": STRANGER,
    }
    ours = set(_pods(docs))
    need = _needs(docs)
    wrong = []
    for src, s in peers.items():
        for dst, d in peers.items():
            if src not in ours and dst not in ours:
                continue  # between two others: not ours to decide
            for port in PORTS:
                allowed = _allows(policies, "egress", s, d, port) and _allows(
                    policies, "ingress", d, s, port
                )
                if allowed != ((src, dst, port) in need):
                    wrong.append((src, dst, port, "allowed" if allowed else "denied"))
    assert not wrong, wrong


# --- no secret in the repository ----------------------------------------------------------------

SECRETISH = re.compile(r"PASSWORD|TOKEN|SECRET|_KEY$|CREDENTIAL", re.I)
URL_WITH_PASSWORD = re.compile(r"[a-z]+://[^/\s:@]+:([^@\s/]+)@")


def test_k8s_no_secret_is_committed_SEC2() -> None:
    docs = documents()
    assert not [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"]
    for name, w in workloads(docs).items():
        for c in _containers(w):
            for e in c.get("env", []):
                if SECRETISH.search(e["name"]):
                    assert "valueFrom" in e and "value" not in e, (name, e["name"])
    for m in (d for d in docs if d["kind"] == "ConfigMap"):
        for key, value in m.get("data", {}).items():
            assert not SECRETISH.search(key), (m["metadata"]["name"], key)
            for found in URL_WITH_PASSWORD.findall(value):
                assert found.startswith("$"), (m["metadata"]["name"], key)
    for path in sorted(K8S.glob("*.yaml")):
        text = path.read_text()
        assert "-----BEGIN" not in text and "tls.key" not in text, path.name
        for found in URL_WITH_PASSWORD.findall(text):
            assert found.startswith("$"), path.name  # `$app` in a doc line, never a literal


# --- the prepare Job, as compose's `prepare` -----------------------------------------------------


def test_k8s_prepare_job_creates_the_configured_labs_as_the_nats_admin_like_compose() -> None:
    docs = documents()
    compose = yaml.safe_load((ROOT / "compose/docker-compose.yml").read_text())["services"]
    job = workloads(docs)["prepare"]
    assert job["kind"] == "Job"
    (c,) = pod_spec(job)["containers"]
    assert c["command"] == compose["prepare"]["command"] == ["python", "-m", "jpu.stack", "prepare"]
    env = {e["name"]: e for e in c["env"]}
    # SPEC SEC2: only the admin identity creates the stream, its DLQ and the buckets
    assert env["JPU_NATS_USER"]["value"] == compose["prepare"]["environment"]["JPU_NATS_USER"]
    ref = env["JPU_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "jpu-nats", "key": "NATS_PW_ADMIN"}
    assert "${NATS_PW_ADMIN" in compose["prepare"]["environment"]["JPU_NATS_PASSWORD"]
    # the labs it seeds are `labs:` of the file at JPU_CONFIG: jpu-config, mounted there, and
    # the same file compose mounts
    config_path = Path(env_values(c, docs)["JPU_CONFIG"])
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    (config_volume,) = [
        v for v in pod_spec(job)["volumes"] if v["name"] == mounts[str(config_path.parent)]
    ]
    data = next(d for d in docs if d["metadata"]["name"] == config_volume["configMap"]["name"])
    k8s_config = yaml.safe_load(data["data"][config_path.name])
    assert "labs" in k8s_config
    assert k8s_config == yaml.safe_load((ROOT / "compose/config.yaml").read_text())
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"  # servers starting


# --- the one exception: the slurm-agent on a site's Slurm (k8s/components/slurm) --------------

SLURM_COMPONENT = K8S / "components" / "slurm"
# runuser (SETUID, SETGID) to submit as each user's account; the output directory made for that
# account and read back (CHOWN, FOWNER, DAC_OVERRIDE): docs/deployment.md "Slurm"
SLURM_AGENT_CAPABILITIES = {"SETUID", "SETGID", "CHOWN", "FOWNER", "DAC_OVERRIDE"}
SLURM_AGENT_HOST_PATHS = {"/run/munge", "/etc/slurm", "/etc/passwd", "/etc/group"}


def test_k8s_slurm_component_is_the_one_exception_and_only_as_far_as_runuser_needs(
    tmp_path: Path,
) -> None:
    """A site's overlay of k8s/ with the Slurm component renders, fits the schemas, leaves every
    other object as it was, and gives the slurm-agent root with exactly the capabilities named
    above, the host's munge socket, slurm.conf and accounts, and nothing else."""
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(K8S, tmp_path)],
                "components": [os.path.relpath(SLURM_COMPONENT, tmp_path)],
            }
        )
    )
    docs = rendered(tmp_path)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    base = {(d["kind"], d["metadata"]["name"]): d for d in documents()}
    ours = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert ours.keys() == base.keys()
    changed = {key for key in ours if ours[key] != base[key]}
    assert changed == {("Deployment", "slurm-agent")}

    agent = ours[("Deployment", "slurm-agent")]
    spec = pod_spec(agent)
    (c,) = spec["containers"]
    entry = yaml.safe_load((SLURM_COMPONENT / "kustomization.yaml").read_text())["images"]
    assert c["image"] == f"{entry[0]['newName']}:{entry[0]['newTag']}"
    containerfile = (ROOT / "compose/images/agent-slurm.Containerfile").read_text()
    assert re.findall(r"^USER (\S+)", containerfile, re.M)[-1] == "root"  # as the pod runs it
    assert spec["securityContext"]["runAsUser"] == 0
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert not c["securityContext"].get("privileged", False)
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert set(c["securityContext"]["capabilities"]["add"]) == SLURM_AGENT_CAPABILITIES
    assert _security(agent, c, "seccompProfile") == {"type": "RuntimeDefault"}
    assert not (spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"))
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert set(host.values()) == SLURM_AGENT_HOST_PATHS
    for m in c["volumeMounts"]:
        if m["name"] in host and host[m["name"]] != "/run/munge":  # the socket: connect() only
            assert m.get("readOnly") is True, m
    env = env_values(c, docs)
    assert env["JPU_SLURM_BACKEND"] == "slurm"
    assert env["JPU_SLURM_CREATE_ACCOUNTS"] == "0"  # the site's accounts, never a local useradd

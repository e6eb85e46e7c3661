"""SPEC SEC4, builds: what a build container is started with, and the host's rule (no I/O)."""

from __future__ import annotations

from jpu.backends import buildnet


def test_build_runs_on_the_fenced_network_with_no_name_for_the_host_SEC4() -> None:
    assert f"--network={buildnet.NETWORK}" in buildnet.RUN_ARGS
    assert "--add-host=host.containers.internal:127.0.0.1" in buildnet.RUN_ARGS


def test_host_rejects_everything_the_build_bridge_sends_it_SEC4() -> None:
    rule, *forwards = buildnet.firewall_rules("podman7")
    assert rule[:3] == ["INPUT", "-i", "podman7"] and rule[-2:] == ["-j", "REJECT"]
    assert "-p" not in rule and "--dport" not in rule  # every protocol and port
    # nor the host's other container bridges (a containerised deployment's servers)
    assert [f[:5] for f in forwards] == [
        ["FORWARD", "-i", "podman7", "-o", "podman+"],
        ["FORWARD", "-i", "podman7", "-o", "cni-podman+"],
    ]


def test_build_has_no_raw_sockets_on_the_shared_bridge_SEC4() -> None:
    assert "--cap-drop=NET_RAW" in buildnet.RUN_ARGS

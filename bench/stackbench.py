"""Shared by bench_gateway.py and bench_e2e.py: a real JPU-Share stack on loopback, and a small
closed-loop HTTP load generator.

`BenchStack` does what `python -m jpu.stack run` does — embedded NATS JetStream + PostgreSQL
(durable, as `make run`), `prepare()` (migrations, stream, inventory, demo users), then the
services as child processes under the stack's `Supervisor` — but lets a bench pick which services
run and override configuration keys through the environment (JPU_<KEY>).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from jpu.config import Config, load_config
from jpu.embedded.nats import EmbeddedNats, free_port
from jpu.embedded.postgres import EmbeddedPostgres
from jpu.stack.prepare import prepare
from jpu.stack.run import wait_ready
from jpu.stack.supervisor import Supervisor
from jpu.testing.nats_cluster import NatsCluster, wait_jetstream

DEMO_TOKENS = [
    f"demo-{u}" for u in ("bcg-alice", "bcg-bob", "kdg-carol", "kdg-dave", "osl-erin", "osl-frank")
]


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


_LOG_TAIL = 20  # lines of a restarted service's log shown on exit


class BenchStack:
    """Servers + selected services in a temporary data dir; everything stops on exit."""

    def __init__(
        self, services: tuple[str, ...], overrides: Mapping[str, str], *, cluster: bool = False
    ) -> None:
        """`cluster`: a 3-node JetStream cluster (the stream and buckets with 3 replicas, SPEC
        O3) instead of one embedded server."""
        self.services = services
        self.overrides = dict(overrides)
        self.root = Path(tempfile.mkdtemp(prefix="jpu-bench-"))
        self.root.chmod(0o755)  # as root, PostgreSQL runs as `postgres` and must reach it
        self.cluster = cluster
        self.nats: EmbeddedNats | NatsCluster = (
            NatsCluster(self.root / "nats") if cluster else EmbeddedNats(self.root / "nats")
        )
        self.postgres = EmbeddedPostgres(self.root / "pg")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env: dict[str, str] = {}
        self.config: Config | None = None
        self.supervisor: Supervisor | None = None
        self._stop = asyncio.Event()

    async def __aenter__(self) -> BenchStack:
        try:
            await self._start()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def _start(self) -> None:
        nats_url = self.nats.start()
        if self.cluster:
            await wait_jetstream(nats_url)
            self.overrides.setdefault("JPU_STREAM_REPLICAS", "3")
        db_url = self.postgres.start()
        self.env = {
            **os.environ,
            "JPU_NATS_URL": nats_url,
            "JPU_DATABASE_URL": db_url,
            "JPU_GATEWAY_PORT": str(self.port),
            "JPU_DATA_DIR": str(self.root / "data"),
            **self.overrides,
        }
        self.config = load_config(env=self.env)
        await prepare(self.config, demo=True)
        self.supervisor = Supervisor(self.env, self.root / "logs", self.services)
        self.supervisor.start(self._stop)
        if "gateway" in self.services and not await wait_ready(
            f"{self.url}/readyz", self._stop, 60.0
        ):
            raise RuntimeError(f"gateway not ready; see {self.root / 'logs' / 'gateway.log'}")

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self.supervisor is not None:
            await self.supervisor.stop()
        self.postgres.stop()
        self.nats.stop()
        restarted = [c for c in self.supervisor.children if c.restarts] if self.supervisor else []
        if restarted:  # a service died mid-run: keep its log, the only account of why
            for c in restarted:
                progress(f"  {c.name} restarted {c.restarts}x; its log kept: {c.log_path}")
                for line in c.log_path.read_text(errors="replace").splitlines()[-_LOG_TAIL:]:
                    progress(f"    | {line[:300]}")
            for sub in ("nats", "pg", "data"):
                shutil.rmtree(self.root / sub, ignore_errors=True)
            return
        shutil.rmtree(self.root, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        """Current pid of each service (for py-spy or top)."""
        assert self.supervisor is not None
        return {c.name: c.proc.pid for c in self.supervisor.children if c.proc is not None}


@dataclass
class LoadResult:
    ok: int
    errors: dict[str, int]
    elapsed_s: float
    latencies_ms: list[float] = field(repr=False)
    cpu_s: dict[str, float] = field(default_factory=dict)  # see cpu_use

    @property
    def rate(self) -> float:
        return self.ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]

    def line(self, label: str, ref: LoadResult | None = None) -> str:
        ratio = f"{self.rate / ref.rate:6.3f}x" if ref is not None and ref.rate else "  1.000x"
        errs = f"  errors {self.errors}" if self.errors else ""
        return (
            f"{label:<38} {self.rate:9,.0f} req/s {ratio}   p50 {self.pct(50):6.1f} ms"
            f"   p99 {self.pct(99):6.1f} ms   (n={self.ok}){errs}"
        )

    def cpu_line(self) -> str:
        """CPU per answered request of each part of the stack (empty when not measured)."""
        if not self.cpu_s or not self.ok:
            return ""
        parts = [f"{k} {1000 * v / self.ok:.2f}" for k, v in sorted(self.cpu_s.items())]
        total = 1000 * sum(self.cpu_s.values()) / self.ok
        return f"{'':<38} CPU ms per request: {', '.join(parts)}; total {total:.2f}"


class RawClient:
    """A minimal HTTP/1.1 keep-alive client on one loopback connection: a load generator that
    costs the 2-core machine far less CPU than httpx, so the server gets the cores. Handles only
    what uvicorn answers: Content-Length bodies (no chunked responses)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body or method in ("POST", "PUT"):
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length) if length else b""

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
            self.writer = None


Request = Callable[[RawClient, int], Awaitable[tuple[int, bytes]]]


async def closed_loop(
    port: int,
    request: Request,
    *,
    clients: int,
    max_requests: int,
    max_seconds: float,
    ok_status: tuple[int, ...] = (200, 201),
    label: str = "",
) -> LoadResult:
    """`clients` concurrent loops, each on its own keep-alive connection, until `max_requests`
    were sent or `max_seconds` passed; latency = request written → whole response read."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    issued = 0
    t0 = time.perf_counter()
    deadline = t0 + max_seconds

    async def one_client() -> None:
        nonlocal issued
        client = RawClient("127.0.0.1", port)
        try:
            while issued < max_requests and time.perf_counter() < deadline:
                i = issued
                issued += 1
                start = time.perf_counter()
                try:
                    status, _ = await request(client, i)
                    key = None if status in ok_status else str(status)
                except (OSError, asyncio.IncompleteReadError) as e:
                    key = type(e).__name__
                    await client.close()
                if key is None:
                    latencies.append((time.perf_counter() - start) * 1000)
                else:
                    errors[key] = errors.get(key, 0) + 1
        finally:
            await client.close()

    async def report() -> None:
        while True:
            await asyncio.sleep(5.0)
            progress(f"  {label}: {len(latencies)} ok, {time.perf_counter() - t0:.0f} s")

    reporter = asyncio.create_task(report())
    try:
        await asyncio.gather(*(one_client() for _ in range(clients)))
    finally:
        reporter.cancel()
    return LoadResult(len(latencies), errors, time.perf_counter() - t0, latencies)


@contextlib.contextmanager
def profiling(py_spy: str | None, pids: dict[str, int], seconds: float, tag: str) -> Iterator[None]:
    """`--profile PY_SPY`: sample each service with py-spy during the block (collapsed stacks in
    py-spy-<tag>-<service>.txt in the current directory); py-spy is a tool, not a dependency."""
    if not py_spy:
        yield
        return
    record = [py_spy, "record", "-d", str(int(seconds) + 5), "-r", "200", "-f", "raw"]
    procs = [
        subprocess.Popen(
            [*record, "-p", str(pid), "-o", f"py-spy-{tag}-{name}.txt"], stdout=subprocess.DEVNULL
        )
        for name, pid in pids.items()
    ]
    try:
        yield
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)  # py-spy writes what it sampled so far
            p.wait(30)


def _tree_cpu() -> dict[int, tuple[str, float]]:
    """This process and its descendants: pid -> (what it is, CPU seconds used so far)."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[str, int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
        procs[int(entry.name)] = (cmd, int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    mine = {os.getpid()}
    grew = True
    while grew:
        new = {pid for pid, (_, ppid, _) in procs.items() if ppid in mine and pid not in mine}
        mine |= new
        grew = bool(new)
    return {pid: (_kind(pid, procs[pid][0]), procs[pid][2]) for pid in mine if pid in procs}


def _kind(pid: int, cmd: str) -> str:
    if pid == os.getpid():
        return "client"
    for name in ("nats-server", "postgres"):
        if name in cmd:
            return name
    module = next((w for w in cmd.split() if w.startswith("jpu_services.")), None)
    return module.removeprefix("jpu_services.") if module else "other"


@contextlib.contextmanager
def cpu_use(into: dict[str, float]) -> Iterator[None]:
    """Add to `into` the CPU seconds each part of the stack used during the block, from /proc:
    each service (its processes together), nats-server, PostgreSQL (every backend), this load
    generator. On a shared machine CPU per request moves less than requests per second do."""
    before = _tree_cpu()
    yield
    for pid, (kind, cpu) in _tree_cpu().items():
        into[kind] = into.get(kind, 0.0) + cpu - before.get(pid, (kind, 0.0))[1]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")

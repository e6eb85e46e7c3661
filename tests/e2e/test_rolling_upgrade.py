"""Rolling upgrade from the previous release (docs/operations.md, Upgrades; SPEC E1, E3, E6, O5).

The previous release (jpu.testing.previous_release: a git worktree of that commit with its own
venv, built once per commit into a cache) runs every service as its own process on a NATS
JetStream of the test's own, set up as `make run` sets up its embedded one, and the session's
PostgreSQL; local backend. With jobs running (held by a gate), queued behind
them and LLM backfill on the idle GPUs, a client keeps submitting while each service in turn is
replaced by this checkout's: the new copy is started next to the old one and the old one is
stopped (SIGTERM, it drains and exits 0) once the new one is ready; the two singletons
(slurm-agent, notifier) are stopped first and then started. Then every job is let finish and:

* nothing lost: every submit a client was told was accepted is in the log and the API;
* nothing done twice: no attempt dispatched, started, ended or executed twice, no charge twice
  (jpu.testing.crash.check_log, the jobs' own launch marks);
* the old log folds with the new code: the new fold of the whole stream (old and new events)
  satisfies every invariant and equals what the API shows (job by job, lab by lab);
* the servers are set up as a deployment's: each service connects to NATS as its own identity
  with its subject permissions (SPEC SEC2), the old release's services too;
* PostgreSQL's projections equal a rebuild from the log by the new code
  (`python -m jpu.tools.replay`), and no projection recorded a fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats
import nats.errors
import pytest
import pytest_asyncio
import yaml

from jpu.backends import joblogs
from jpu.backends.local.stop import terminate_all
from jpu.bus import Delivered, EventBus, auth, permissions
from jpu.config import load_config
from jpu.embedded.base import free_port
from jpu.embedded.nats import EmbeddedNats
from jpu.events import BackfillStarted, JobDispatched, JobEnded, JobStarted, UsageCharged
from jpu.stack import private
from jpu.store import create_database, drop_database
from jpu.testing import previous_release
from jpu.testing.crash import check_log, compare_api
from jpu.testing.crash_harness import (
    LAUNCH_MARK,
    Probe,
    Spec,
    Workload,
    launch_violations,
    read_log,
    run_replay,
)
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.stack_process import remove_data_dir, world_searchable_tmpdir

pytestmark = pytest.mark.slow

# One node whose two GPUs the held jobs take (more wait behind them), one whose GPUs idle and get
# LLM backfill (B1) until the client's jobs preempt it (B2).
CONFIG = {
    "nodes": [
        {"name": "gpu-4090x2-01", "gpus": {"rtx4090": 2}},
        {"name": "gpu-3080tix2-01", "gpus": {"rtx3080ti": 2}},
    ],
    "labs": [{"name": "BCG"}, {"name": "KDG"}, {"name": "OSL"}],
}
ENV = {
    "JPU_CYCLE_S": "0.5",  # D3/D8
    "JPU_CANCEL_GRACE_S": "2",  # X5
    "JPU_SUBMIT_RATE_PER_S": "0",  # the client submits in a loop
    "JPU_BACKFILL_SETTLE_S": "1",  # B1: backfill within the run
    "JPU_ESTIMATE_EVERY_S": "1",  # U4
    # O6: the old services write snapshots the new ones start from
    "JPU_SNAPSHOT_EVERY_EVENTS": "40",
    # old and new gateway share the port while one replaces the other
    "JPU_GATEWAY_REUSE_PORT": "1",
}
# The order of replacement (docs/operations.md, Upgrades): the services that fold what others
# write first, the deciders next, the slurm-agent, and the gateway (where new fields enter) last.
ORDER = ("accounting", "notifier", "intake", "backfill", "dispatcher", "slurm_agent", "gateway")
SINGLETONS = {"slurm_agent", "notifier"}  # one copy by deployment: stopped, then replaced
READY = {  # what a service logs once it serves (its own log)
    "gateway": "Application startup complete",
    "intake": "intake ready",
    "accounting": "accounting ready",
    "backfill": "backfill ready",
    "dispatcher": "connected",  # a standby; it leads once the old leader let go
    "slurm_agent": "recovered:",
    "notifier": "connected",
}
READY_S = 60.0
SUBMITTERS = ("osl-erin", "bcg-bob")


@dataclass
class Proc:
    service: str
    version: str  # "old" | "new"
    popen: subprocess.Popen[bytes]
    log: Path

    def logged(self, prefix: str) -> bool:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return False
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                if line.startswith("{") and str(json.loads(line).get("msg", "")).startswith(prefix):
                    return True
        return False


class Platform:
    """The services as separate processes, each run by the old release's or this checkout's
    interpreter, on one data dir, stream and database (what a deployment upgrades in place)."""

    def __init__(
        self, env: dict[str, str], base: Path, release: previous_release.Release, secrets: Path
    ) -> None:
        self.base, self.release, self.secrets = base, release, secrets
        self.data_dir = base / "data"
        self.data_dir.mkdir()
        private.make_private(self.data_dir)  # SPEC SEC1
        (base / "config.yaml").write_text(yaml.safe_dump(CONFIG))
        self.gates = base / "gates"
        self.gates.mkdir()
        self.gates.chmod(0o755)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        inherited = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JPU_CONFIG")}
        self.env = {
            **inherited,
            **env,
            "JPU_CONFIG": str(base / "config.yaml"),
            "JPU_DATA_DIR": str(self.data_dir),
            "JPU_GATEWAY_PORT": str(self.port),
            "PYTHONUNBUFFERED": "1",
        }
        config = load_config(env=self.env)
        if (outputs := private.prepare_output_root(config, self.env)) is not None:  # SEC1
            self.env["JPU_AGENT_OUTPUT_ROOT"] = str(outputs)  # gateway and agents agree
        self.config = load_config(env=self.env)
        self.procs: dict[str, list[Proc]] = {}
        (self.data_dir / "logs").mkdir()

    def python(self, version: str) -> str:
        return str(self.release.python) if version == "old" else sys.executable

    def prepare(self, version: str = "old") -> None:
        """The one-shot step: schema, stream, inventory, labs; the old release's also the demo
        users. The new release's runs once every service is new (docs/operations.md, Upgrades):
        it adopts into the log the identities the old one kept only in its tables (SEC3)."""
        demo = ["--demo"] if version == "old" else []
        r = subprocess.run(
            [self.python(version), "-m", "jpu.stack", "prepare", *demo],
            env=self.env, cwd=self.base, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode == 0, f"{version} release's prepare failed:\n{r.stdout}\n{r.stderr}"

    def start(self, service: str, version: str) -> Proc:
        log = self.data_dir / "logs" / f"{service}-{version}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                [self.python(version), "-m", f"jpu_services.{service}"],
                env={**self.env, **auth.identity_env(service, self.secrets)},  # its own (SEC2)
                cwd=self.base, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True,
            )  # fmt: skip
        proc = Proc(service, version, popen, log)
        self.procs.setdefault(service, []).append(proc)
        return proc

    async def ready(self, proc: Proc, what: str | None = None) -> None:
        what = what or READY[proc.service]
        deadline = time.monotonic() + READY_S
        while not proc.logged(what):
            rc = proc.popen.poll()
            if rc is not None or time.monotonic() > deadline:
                tail = proc.log.read_text(errors="replace")[-3000:]
                pytest.fail(f"{proc.version} {proc.service} not ready ({what!r}), rc={rc}:\n{tail}")
            await asyncio.sleep(0.1)

    async def stop(self, proc: Proc, grace_s: float = 20.0) -> int:
        """SIGTERM (the service drains), SIGKILL after `grace_s`; its exit code."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while proc.popen.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait()
            return -9
        return int(proc.popen.returncode)

    def kill_all(self) -> None:
        for proc in itertools.chain.from_iterable(self.procs.values()):
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait()
        terminate_all(self.data_dir, 2.0)  # the local jobs and backfill (SPEC O2)

    def output_dir(self, job_id: str, attempt: int = 1) -> Path:
        """JOB_OUTPUT_DIR of an attempt (X2), where the services put it (SEC1)."""
        return joblogs.attempt_dir(private.output_root(self.config, self.env), job_id, attempt)

    def hold(self, name: str) -> str:
        return f"while [ ! -e {self.gates / name} ]; do sleep 0.05; done\n"

    def remove(self) -> None:
        remove_data_dir(self.data_dir)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def settled() -> None:
    """Overrides tests/e2e/conftest.py's: this test runs its own platform, not the module stack."""


@pytest.fixture(scope="module")
def release() -> previous_release.Release:
    t0 = time.monotonic()
    built = previous_release.checkout()
    where = subprocess.run(
        [str(built.python), "-P", "-c", "import jpu, jpu_services; print(jpu.__file__)"],
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(built.src), (where.stdout, where.stderr)
    print(f"\nprevious release {built.commit[:12]} ready in {time.monotonic() - t0:.1f} s")
    return built


@pytest.fixture
def secured_nats(tmp_path: Path) -> Iterator[tuple[str, Path, str, str]]:
    """A NATS JetStream of its own that, as every deployment's, requires one identity per
    service with its subject permissions (SPEC SEC2; jpu.stack.servers): (url, the passwords'
    file, stream, prefix). The old release's services must run under it as they are."""
    stream, prefix = unique_names()
    secrets = auth.secrets_path(tmp_path / "nats-auth")
    conf = auth.write_server_config(
        secrets.with_name("nats-server.conf"), auth.ensure_secrets(secrets), stream, prefix
    )
    server = EmbeddedNats(tmp_path / "nats", port=free_port(), extra_args=["-c", str(conf)])
    try:
        url = server.start()
        yield url, secrets, stream, prefix
    finally:
        server.stop()


async def test_SEC2_the_upgrade_runs_on_a_nats_that_refuses_a_client_without_identity(
    secured_nats: tuple[str, Path, str, str],
) -> None:
    """What the rolling upgrade below runs under is a deployment's NATS, not an open one."""
    with pytest.raises((nats.errors.Error, OSError)):
        nc = await nats.connect(
            secured_nats[0], allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3
        )
        await nc.close()


@pytest_asyncio.fixture
async def platform(
    secured_nats: tuple[str, Path, str, str],
    pg_server_dsn: str,
    release: previous_release.Release,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Platform]:
    url, secrets, stream, prefix = secured_nats
    # the test's own connections (the log's reader, the replay tool) as the admin (SEC2)
    admin = auth.identity_env(permissions.ADMIN, secrets)
    for key, value in admin.items():
        monkeypatch.setenv(key, value)
    database = f"upgrade_{uuid.uuid4().hex[:12]}"
    env = {
        **ENV,
        **admin,
        "JPU_NATS_URL": url,
        "JPU_DATABASE_URL": await create_database(pg_server_dsn, database),
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
    }
    p = Platform(env, world_searchable_tmpdir("jpu-upgrade-"), release, secrets)
    try:
        yield p
    finally:
        p.kill_all()
        await drop_database(pg_server_dsn, database)
        if os.environ.get("JPU_E2E_KEEP"):
            print(f"upgrade data dir kept: {p.base}")
        else:
            p.remove()


class Submitter(Workload):
    """Users who keep submitting short jobs (with an Idempotency-Key, retried on an error or no
    answer, Q6) until told to stop: what a client sees while the platform is upgraded."""

    def __init__(self, url: str) -> None:
        super().__init__(url, random.Random(0))  # its clients (the demo users) and waits
        self.stop = asyncio.Event()
        self.counter = itertools.count()

    async def submit(self, user: str, command: str, **fields: Any) -> Spec:
        i = next(self.counter)
        body = {"name": f"up-{i}", "command": LAUNCH_MARK + command, "num_gpus": 1, **fields}
        spec = Spec("short", user, body, key=f"upgrade-{uuid.uuid4().hex}")
        await self.clients[user].submit(spec)
        self.accepted.append(spec)
        return spec

    async def loop(self, user: str) -> None:
        while not self.stop.is_set():
            await self.submit(user, "sleep 0.2", tiers=["rtx3080ti"])  # preempts backfill (B2)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.4)


async def until(cond: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if value := await cond():
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)


@contextlib.contextmanager
def timed(label: str, into: dict[str, float]) -> Iterator[None]:
    t0 = time.monotonic()
    yield
    into[label] = round(time.monotonic() - t0, 2)


async def test_E1_E3_O5_rolling_upgrade_from_the_previous_release(platform: Platform) -> None:
    t_start = time.monotonic()
    times: dict[str, float] = {}
    platform.prepare()
    with timed("old_start_s", times):
        first = {s: platform.start(s, "old") for s in ORDER}
        for proc in first.values():
            await platform.ready(proc)
        await platform.ready(first["dispatcher"], "leading")
    config = platform.config
    bus = await EventBus.connect(
        config.nats_url, stream=config.stream_name, prefix=config.subject_prefix, name="upgrade"
    )
    probe = Probe(platform, bus, config.database_url)  # type: ignore[arg-type]
    load = Submitter(platform.url)
    admin = httpx.AsyncClient(
        base_url=platform.url, headers={"Authorization": "Bearer demo-admin"}, timeout=5.0
    )
    exits: dict[str, int] = {}
    log: list[Delivered] = []
    try:
        # Before: running (held on the 4090s), queued behind them, backfill on the 3080 Tis.
        held = [
            await load.submit("bcg-alice", platform.hold("go"), tiers=["rtx4090"]) for _ in "ab"
        ]
        queued = [await load.submit("kdg-carol", "sleep 0.5", tiers=["rtx4090"]) for _ in "ab"]

        async def before() -> bool:
            states = [(await load.clients[s.user].job(str(s.job_id)) or {}) for s in held + queued]
            live = (await admin.get("/v1/backfill")).json()["backfill"]
            return (
                [j.get("state") for j in states[:2]] == ["RUNNING"] * 2
                and bool(live)
                and all(j.get("state") in ("GLOBAL_QUEUE_WAIT", "RESERVING") for j in states[2:])
            )

        await until(before, 60, "2 jobs running, 2 queued and backfill on the idle GPUs")

        # The upgrade, under submits.
        loops = [asyncio.create_task(load.loop(u)) for u in SUBMITTERS]
        await asyncio.sleep(1.0)
        t_upgrade = time.monotonic()
        for service in ORDER:
            old = first[service]
            with timed(f"replace_{service}_s", times):
                if service in SINGLETONS:
                    exits[service] = await platform.stop(old)
                    await platform.ready(platform.start(service, "new"))
                else:
                    new = platform.start(service, "new")
                    await platform.ready(new)
                    exits[service] = await platform.stop(old)
                    if service == "dispatcher":
                        await platform.ready(new, "leading")
            await asyncio.sleep(0.5)  # submits reach each mix of versions
        # the new release's prepare once every service is new: it adopts into the log the
        # identities the old one kept only in its tables (SEC3) — new event types, which an old
        # service would not decode
        with timed("prepare_new_s", times):
            await asyncio.to_thread(platform.prepare, "new")
        times["upgrade_s"] = round(time.monotonic() - t_upgrade, 2)
        await asyncio.sleep(2.0)
        load.stop.set()
        await asyncio.gather(*loops)

        # After: everything finishes on the new version.
        (platform.gates / "go").touch()
        stuck = await load.wait_terminal(90)
        assert not stuck, f"not terminal after the upgrade: {stuck}"

        async def settled() -> bool:
            await read_log(bus, log)
            check = check_log(log, config)
            return not (set(check.owed) - set(check.charged)) and await probe.applied(log[-1].seq)

        await until(settled, 60, "charges owed written and projections at the log's end")
        await read_log(bus, log)
        check = check_log(log, config)  # the new code's fold of the whole log (SPEC E1)
        accepted = {str(s.job_id) for s in load.accepted}
        owners = {str(s.job_id): s.user for s in load.accepted}
        api_jobs = {
            j: await load.clients[owners.get(j, "bcg-alice")].job(j)
            for j in sorted(accepted | set(check.state.jobs))
        }
        labs = (await load.clients["bcg-alice"].http.get("/v1/labs")).json()["labs"]
        # O5, F5 counted here as well: per job attempt one dispatch the fold applied, one start,
        # one end and one charge for its end
        once = Counter(
            (type(d.event).__name__, d.event.job_id, d.event.attempt)
            for d in log
            if isinstance(d.event, JobStarted | JobEnded)
            or (isinstance(d.event, JobDispatched) and d.seq in check.applied_dispatches)
            or (isinstance(d.event, UsageCharged) and d.event.reason == "job_end")
        )
        violations = [
            f"{kind} {job} attempt {n}: {c} times" for (kind, job, n), c in once.items() if c > 1
        ]
        dispatched = sum(1 for kind, _, _ in once if kind == "JobDispatched")
        charged = sum(1 for kind, _, _ in once if kind == "UsageCharged")
        violations += (
            check.violations
            + compare_api(check, api_jobs, {lab["lab"]: lab for lab in labs}, accepted)
            + launch_violations(platform, check)  # type: ignore[arg-type]
        )
        conn = await asyncpg.connect(config.database_url)
        try:
            faults = await conn.fetch(
                "SELECT projection, seq, event_type, error FROM projection_faults"
            )
        finally:
            await conn.close()
        violations += [f"projection fault: {dict(r)}" for r in faults]
        violations += [f"parked message: {p}" for p in await bus.parked()]
        replay_rc, replay_out = await run_replay(platform, config)  # type: ignore[arg-type]
    finally:
        await admin.aclose()
        await load.close()
        await probe.close()
        await bus.close()

    for service, procs in platform.procs.items():
        for proc in procs:
            if proc.version == "new":
                exits[f"{service}-new"] = await platform.stop(proc)
    times["total_s"] = round(time.monotonic() - t_start, 1)
    summary = {
        "previous_release": platform.release.commit[:12],
        "jobs": len(load.accepted),
        "events": len(log),
        "backfill_started": sum(isinstance(d.event, BackfillStarted) for d in log),
        "backfill_preempted": check.stats["backfill_ended:preempted"],
        "attempts_dispatched": dispatched,
        "attempts_charged": charged,
        "final_states": {k: v for k, v in check.stats.items() if k.startswith("final:")},
        "submits_retried": sum(1 for s in load.accepted if len(s.statuses) > 1),
        "exit_codes": exits,
        "times": times,
        "replay": replay_out.strip().splitlines()[-1:],
    }
    print("\nrolling-upgrade summary:\n" + json.dumps(summary, indent=1))
    assert replay_rc == 0, f"python -m jpu.tools.replay exited {replay_rc}:\n{replay_out}"
    assert not violations, f"{len(violations)} violations:\n" + "\n".join(violations[:50])
    assert all(rc == 0 for rc in exits.values()), f"a service did not drain and exit 0: {exits}"
    # what the run must have exercised for its verdict to mean anything
    assert len(load.accepted) >= len(ORDER) + 4, summary
    assert summary["backfill_started"] and dispatched >= len(load.accepted), summary
    assert charged >= len(load.accepted), summary  # every job ran, so each was charged once

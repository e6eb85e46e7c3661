"""pytest plugin: a real PostgreSQL server per session and a fresh database per test.

List it in tests/conftest.py with the servers plugin: `pytest_plugins = ["jpu.testing.servers",
"jpu.testing.pg_fixtures"]`. The server is an embedded process or a container as
JPU_TEST_SERVERS chooses (jpu.testing.servers); JPU_TEST_DATABASE_URL points the suite at an
existing server instead (any database on it; the fixtures create and drop their own databases
there, so the role needs CREATEDB).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from jpu.events import (
    AnyEvent,
    BackfillEnded,
    BackfillStarted,
    ChargeReason,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobEndState,
    JobPromoted,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    MaintenanceChanged,
    NodeInventoryObserved,
    ReservationGrown,
    ReservationReleased,
    ReservationStarted,
    UsageCharged,
    WorkspaceBuildFailed,
    WorkspaceBuildRequested,
    WorkspaceBuilt,
    WorkspaceDeleted,
    new_event_id,
)
from jpu.store import create_database, create_pool, drop_database, migrate
from jpu.testing.servers import ServerProvider

DatabaseFactory = Callable[[], Awaitable[str]]


@pytest.fixture(scope="session")
def pg_server_dsn(server_provider: ServerProvider) -> Iterator[str]:
    dsn = os.environ.get("JPU_TEST_DATABASE_URL")
    if dsn:
        yield dsn
        return
    # Not pytest's tmp_path: its parents are mode 0700 and, as root, postgres runs as `postgres`.
    root = Path(tempfile.mkdtemp(prefix="jpu-test-pg-"))
    root.chmod(0o755)
    server = server_provider.postgres(root / "pg", durable=False)  # tests don't need fsync
    try:
        server.start()
        # The superuser: the fixtures create and drop a database per test (SPEC SEC2 keeps the
        # services' own role from doing that).
        yield server.admin_dsn()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest_asyncio.fixture
async def pg_database_factory(pg_server_dsn: str) -> AsyncIterator[DatabaseFactory]:
    """Creates uniquely named empty databases on the test server; drops them after the test."""
    created: list[str] = []

    async def make() -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        created.append(name)
        return await create_database(pg_server_dsn, name)

    try:
        yield make
    finally:
        for name in created:
            await drop_database(pg_server_dsn, name)


@pytest_asyncio.fixture
async def pg_dsn(pg_database_factory: DatabaseFactory) -> str:
    """DSN of a fresh, empty database of its own for this test."""
    return await pg_database_factory()


@pytest_asyncio.fixture
async def pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """An asyncpg pool (jpu.store.create_pool) on `pg_dsn` with all migrations applied."""
    p = await create_pool(pg_dsn, min_size=1, max_size=5)
    try:
        await migrate(p)
        yield p
    finally:
        await p.close()


# --- a realistic event log for projection tests (not a fixture: also used by subprocesses) ---

_NODES = (
    ("gpu-4090x2-01", "rtx4090", 82.6),
    ("gpu-4090x2-02", "rtx4090", 82.6),
    ("gpu-3080tix2-01", "rtx3080ti", 34.1),
    ("gpu-3080tix2-02", "rtx3080ti", 34.1),
)
_HALF_LIFE_S = 7 * 24 * 3600.0


def sample_log(n_jobs: int, *, t0: float = 1_000.0) -> list[AnyEvent]:
    """Inventory, maintenance, backfill and `n_jobs` job lifecycles (reservations, a demotion,
    cancels, an OOM retry) with the UsageCharged events accounting would append (F3)."""
    log: list[AnyEvent] = []
    clock = iter(range(10**9))

    def kw() -> dict[str, Any]:
        return {"event_id": new_event_id(), "ts": t0 + next(clock)}

    usage: dict[str, tuple[float, float]] = {}

    def charge(lab: str, amount: float, job_id: str, reason: ChargeReason) -> UsageCharged:
        k = kw()
        value, as_of = usage.get(lab, (0.0, k["ts"]))
        value = value * 0.5 ** ((k["ts"] - as_of) / _HALF_LIFE_S) + amount
        usage[lab] = (value, k["ts"])
        return UsageCharged(
            **k,
            lab=lab,
            amount=amount,
            value_after=value,
            as_of=k["ts"],
            job_id=job_id,
            reason=reason,
        )

    for node, tier, _ in _NODES:
        log.append(NodeInventoryObserved(**kw(), node=node, gpus={tier: 2}))
    log.append(
        BackfillStarted(**kw(), backfill_id="bf1", node=_NODES[3][0], tier="rtx3080ti", gpu=1)
    )
    for i in range(n_jobs):
        node, tier, tflops = _NODES[i % len(_NODES)]
        job, lab = f"job{i:06d}", ("BCG", "KDG", "NLP")[i % 3]
        n = 2 if i % 5 == 0 else 1
        j: dict[str, Any] = {"job_id": job}
        log.append(
            JobSubmitted(
                **kw(),
                **j,
                lab=lab,
                user=f"u{i % 7}",
                name=f"run-{i}",
                command="python train.py",
                num_gpus=n,
                env={"I": str(i)},
            )
        )
        if i % 11 == 3:  # cancelled in the personal queue
            log += [
                JobCancelRequested(**kw(), **j, by="u"),
                JobEnded(**kw(), **j, attempt=1, state="CANCELLED"),
            ]
            continue
        k = kw()
        log.append(JobPromoted(**k, **j, queue_entered_at=k["ts"]))
        if n == 2:
            log += [ReservationStarted(**kw(), **j, node=node, tier=tier, gpus=[0])]
            if i % 10 == 0:  # R3: demoted, charged at once, reserves again
                log += [
                    ReservationReleased(
                        **kw(),
                        **j,
                        node=node,
                        tier=tier,
                        gpus=[0],
                        reason="demoted",
                        gpu_seconds=5.0,
                        charged_now=True,
                        tflops=tflops,
                    ),
                    charge(lab, 5.0 * tflops, job, "demoted"),
                    ReservationStarted(**kw(), **j, node=node, tier=tier, gpus=[0]),
                ]
            log += [
                ReservationGrown(**kw(), **j, node=node, tier=tier, gpus=[0, 1], added=[1]),
                JobDispatched(**kw(), **j, attempt=1, node=node, tier=tier, gpus=[0, 1]),
                ReservationReleased(
                    **kw(),
                    **j,
                    node=node,
                    tier=tier,
                    gpus=[0, 1],
                    reason="dispatched",
                    gpu_seconds=4.0,
                    charged_now=False,
                    tflops=tflops,
                ),
            ]
        else:
            log.append(JobDispatched(**kw(), **j, attempt=1, node=node, tier=tier, gpus=[1]))
        log.append(JobStarted(**kw(), **j, attempt=1, backend_job_id=str(1000 + i)))
        gpus = [0, 1] if n == 2 else [1]
        if i % 13 == 7:  # X8: GPU OOM, retried with more VRAM, then completes
            log += [
                JobRetryScheduled(**kw(), **j, attempt=2, min_vram_gb=25),
                JobEnded(
                    **kw(),
                    **j,
                    attempt=1,
                    state="FAILED",
                    node=node,
                    tier=tier,
                    gpus=gpus,
                    oom=True,
                    reason="OOM",
                    exit_code=1,
                    usage=tflops,
                ),
                charge(lab, tflops, job, "job_end"),
                JobDispatched(**kw(), **j, attempt=2, node=node, tier=tier, gpus=gpus),
                JobStarted(**kw(), **j, attempt=2, backend_job_id=str(9000 + i)),
            ]
        state: JobEndState = "FAILED" if i % 9 == 4 else "COMPLETED"
        seconds = 60.0 * (1 + i % 4) * n
        log += [
            JobEnded(
                **kw(),
                **j,
                attempt=1 if i % 13 != 7 else 2,
                state=state,
                exit_code=0 if state == "COMPLETED" else 1,
                node=node,
                tier=tier,
                gpus=gpus,
                gpu_seconds_run=seconds,
                tflops=tflops,
                usage=seconds * tflops,
            ),
            charge(lab, seconds * tflops, job, "job_end"),
        ]
        if i == n_jobs // 2:
            log += [
                MaintenanceChanged(**kw(), state="DRAINING", by="admin", message="NFS"),
                MaintenanceChanged(**kw(), state="NORMAL", by="admin"),
            ]
    log.append(
        BackfillEnded(
            **kw(),
            backfill_id="bf1",
            node=_NODES[3][0],
            tier="rtx3080ti",
            gpu=1,
            reason="reclaimed",
        )
    )
    log.append(
        NodeInventoryObserved(**kw(), node=_NODES[0][0], gpus={"rtx4090": 2}, down={"rtx4090": [1]})
    )
    return log + _workspaces_log(kw)


def _workspaces_log(kw: Callable[[], dict[str, Any]]) -> list[AnyEvent]:
    """X4a: READY, FAILED, rebuilt (a late outcome of build 1 ignored) and deleted workspaces."""
    log: list[AnyEvent] = []
    for i, fate in enumerate(("ready", "failed", "rebuilt", "deleted")):
        wid = f"w{i:023d}"
        ask = {"workspace_id": wid, "user": f"u{i}", "lab": "BCG", "name": f"ws{i}",
               "scope": "lab" if i == 2 else "user", "source_kind": "requirements",
               "source": "six\n"}  # fmt: skip
        image = f"localhost/jpu-ws-{wid}-b1:latest"
        log.append(WorkspaceBuildRequested(**kw(), **ask, build=1))  # type: ignore[arg-type]
        if fate == "failed":
            log.append(WorkspaceBuildFailed(**kw(), workspace_id=wid, build=1, reason="x", log="e"))
            continue
        if fate == "rebuilt":
            log.append(WorkspaceBuildRequested(**kw(), **ask, build=2))  # type: ignore[arg-type]
        log.append(
            WorkspaceBuilt(**kw(), workspace_id=wid, image=image, size=9, build=1, created_at=1.0)
        )
        if fate == "deleted":
            log.append(WorkspaceDeleted(**kw(), workspace_id=wid, by="admin"))
    return log

"""The crash-safety harness of the running platform (SPEC E2, E3, E6, F4, F5, O5, S2): the
workload, the faults, the probes and the checks that tests/e2e/test_crash_safety.py and
tests/e2e/test_cluster_faults.py run; see test_crash_safety.py for what it does and why."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import msgspec

from jpu.bus import Delivered, EventBus
from jpu.config import Config
from jpu.embedded.base import free_port
from jpu.events import JobDispatched, JobEnded, JobStarted, decode
from jpu.store.projections import ALL
from jpu.testing.crash import (
    HELD_SLACK_S,
    Fault,
    KillableNats,
    KillablePostgres,
    LogCheck,
    check_log,
    compare_api,
    wait_exited,
)
from jpu.testing.e2e_stack import ACTIVE, TERMINAL, Stack
from jpu.testing.servers import NatsServers
from jpu.testing.stack_process import alive

SEED = int(os.environ.get("JPU_CRASH_SEED") or random.SystemRandom().randrange(10**6))
USERS = ("bcg-alice", "bcg-bob", "kdg-carol", "kdg-dave", "osl-erin", "osl-frank")
STACK_ENV = {
    "JPU_CYCLE_S": "0.5",  # D3/D8
    "JPU_CANCEL_GRACE_S": "2",  # X5
    "JPU_SUBMIT_RATE_PER_S": "0",  # the workload bursts
    "JPU_BACKFILL_SETTLE_S": "2",  # B1: idle GPUs get backfill within the run
    # O6: followers write snapshots often, so restarted services load one and replay the tail
    "JPU_SNAPSHOT_EVERY_EVENTS": "150",
}
PROJECTIONS = tuple(p.name for p in ALL)
RECOVERY_BOUND_S = 60.0
TRIGGER_BOUND_S = 5.0
TERMINAL_BOUND_S = 150.0
MAX_ACTIVE_JOBS = 3  # S1: the default per-user slots (the demo users have it)
INFLIGHT = 4  # per user: its slots full and one more waiting in its personal queue

# Each execution of an attempt leaves one line in its JOB_OUTPUT_DIR (X2): an attempt the agent
# launched twice (say, across its own restart) shows two.
LAUNCH_MARK = 'echo "$$ $EPOCHREALTIME" >> "$JOB_OUTPUT_DIR/launches"\n'
OOM_SCRIPT = """echo "attempt $JOB_ATTEMPT on GPU $CUDA_VISIBLE_DEVICES"
if [ "$JOB_ATTEMPT" = 1 ]; then
  sleep 0.5
  echo "RuntimeError: CUDA out of memory. Tried to allocate 14.00 GiB" >&2
  exit 1
fi
sleep 1
"""

# The faults, in order: (what, target, inject after one of these events — None: at a random
# moment —, at most this many seconds after it: a random delay spreads the kills over each step
# that event sets off, e.g. a dispatch's prepare → record → spawn → record → JobStarted).
Plan = list[tuple[str, str, frozenset[str] | None, float]]
PLAN: Plan = [
    # the agent's first kill (a short restart back-off, so the attempt still runs when its
    # replacement starts): right after it spawned an attempt, before it saved the pid
    ("kill-after-spawn", "slurm_agent", frozenset({"JobDispatched"}), 0.0),
    ("kill", "gateway", frozenset({"JobSubmitted"}), 0.0),  # the projector, a submit in flight
    ("kill", "slurm_agent", frozenset({"JobCancelRequested"}), 0.3),  # a cancel in flight
    ("kill", "intake", frozenset({"JobPromoted"}), 0.0),
    ("kill", "dispatcher", frozenset({"JobEnded"}), 0.2),  # GPUs just freed, a cycle due
    ("nats", "nats-server", frozenset({"JobDispatched"}), 0.1),
    ("kill", "accounting", frozenset({"JobEnded"}), 0.0),  # a charge owed, not written yet
    ("kill", "gateway", frozenset({"JobStarted"}), 0.0),  # the projector, a start in flight
    ("kill", "backfill", frozenset({"BackfillStarted", "BackfillEnded", "JobDispatched"}), 0.2),
    ("postgres", "postgres", frozenset({"JobEnded"}), 0.1),
    ("kill", "dispatcher", frozenset({"ReservationStarted", "ReservationGrown"}), 0.0),
    ("kill", "intake", frozenset({"JobSubmitted"}), 0.0),  # submitted, not promoted yet (Q5)
    ("kill", "accounting", frozenset({"UsageCharged"}), 0.0),  # charged, its view not yet
    ("kill", "gateway-2", None, 0.0),  # the API-only gateway
    ("kill", "all", frozenset({"JobDispatched"}), 0.3),  # every service process at once
]
READY = {  # the line a service logs once it serves again (its own log)
    "gateway": "Application startup complete",
    "gateway-2": "Application startup complete",
    "intake": "intake ready",
    "dispatcher": "leading",
    "slurm_agent": "recovered:",
    "accounting": "accounting ready",
    "backfill": "backfill ready",
}


# --- servers and stack of our own ---------------------------------------------------------------


@dataclass
class Servers:
    root: Path
    nats: KillableNats
    pg: KillablePostgres


@contextlib.contextmanager
def own_servers(root: Path, nats: KillableNats | NatsServers, pg: Any = None) -> Iterator[Any]:
    """The test's own NATS (one server or a cluster) and PostgreSQL (`pg`, or an embedded one
    under `root`), both started; stopped and removed at the end (JPU_E2E_KEEP=1 keeps them)."""
    if pg is None:
        pg = KillablePostgres(root / "pg", port=free_port())  # durable, like make run's
    try:
        nats.start()
        pg.start()
        yield pg
    finally:
        pg.stop()
        nats.stop()
        if not os.environ.get("JPU_E2E_KEEP"):
            shutil.rmtree(root, ignore_errors=True)


async def own_stack(env: dict[str, str], servers_root: Path) -> AsyncIterator[Stack]:
    """A stack on the test's own servers; it must stop cleanly (exit 0) at the end."""
    s = Stack(env)
    try:
        s.wait_ready()
        yield s
    finally:
        rc = s.stop()
        if os.environ.get("JPU_E2E_KEEP"):
            print(f"data dirs kept: {s.data_dir} {servers_root}")
        else:
            s.remove()
    assert rc == 0, f"stack exited {rc}:\n{s.log_tail()}"


# --- the workload --------------------------------------------------------------------------------


@dataclass
class Spec:
    kind: str  # short | fail | oom | two | cancel_queued | cancel_running | canary
    user: str
    body: dict[str, Any]
    key: str
    job_id: str | None = None
    statuses: list[str] = field(default_factory=list)  # every answer the submit got
    cancel_statuses: list[str] = field(default_factory=list)


def specs_for(user: str, rng: random.Random) -> list[Spec]:
    """One user's jobs, shuffled: long enough that the cluster stays saturated (2-GPU jobs must
    reserve, D3.c) with the users' slots full (a job cancelled in the personal queue, Q5)."""
    counter = iter(range(10**6))

    def spec(kind: str, command: str, num_gpus: int = 1) -> Spec:
        i = next(counter)
        body = {"name": f"cs-{kind}-{i}", "command": LAUNCH_MARK + command, "num_gpus": num_gpus}
        return Spec(kind, user, body, key=f"crash-{SEED}-{user}-{i}")

    jobs = [
        spec("cancel_running", "sleep 60"),
        spec("cancel_queued", "sleep 60"),
        spec("oom", OOM_SCRIPT),
        spec("fail", "sleep 1; exit 3"),
        spec("short", "true"),
        *(spec("two", f"sleep {rng.choice((5, 6, 8))}", num_gpus=2) for _ in range(2)),
        *(spec("short", f"sleep {rng.choice((5, 6, 8, 10, 12))}") for _ in range(6)),
    ]
    rng.shuffle(jobs)
    return jobs


class Client:
    """One user's HTTP client that behaves like a careful one: every submit carries an
    Idempotency-Key and is retried (same key) on a transport error, a 5xx or a 429, so a submit
    that landed but whose answer was lost is learned from the 200 replay (Q6)."""

    def __init__(self, url: str, user: str) -> None:
        self.user = user
        self.http = httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer demo-{user}"}, timeout=12.0
        )

    async def retry(
        self, call: Callable[[], Awaitable[httpx.Response]], ok: tuple[int, ...], seen: list[str]
    ) -> httpx.Response:
        deadline, delay = time.monotonic() + 120.0, 0.2
        while True:
            try:
                r = await call()
                seen.append(str(r.status_code))
                if r.status_code in ok:
                    return r
                if r.status_code < 500 and r.status_code not in (404, 429):
                    raise AssertionError(f"{self.user}: {r.status_code} {r.text}")
            except httpx.TransportError as e:
                seen.append(type(e).__name__)
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.user}: no answer in {ok} within 120 s: {seen}")
            await asyncio.sleep(delay)  # back-off between tries, as any client would
            delay = min(delay * 2, 1.0)

    async def submit(self, spec: Spec) -> dict[str, Any]:
        r = await self.retry(
            lambda: self.http.post(
                "/v1/jobs", json=spec.body, headers={"Idempotency-Key": spec.key}
            ),
            (200, 201),
            spec.statuses,
        )
        body = dict(r.json())
        spec.job_id = str(body["id"])
        return body

    async def try_submit(self, spec: Spec, timeout: float = 3.0) -> dict[str, Any] | None:
        """One try (a probe): the job body on 200/201, else None."""
        try:
            r = await self.http.post(
                "/v1/jobs", json=spec.body, headers={"Idempotency-Key": spec.key}, timeout=timeout
            )
        except httpx.TransportError as e:
            spec.statuses.append(type(e).__name__)
            return None
        spec.statuses.append(str(r.status_code))
        if r.status_code not in (200, 201):
            return None
        body = dict(r.json())
        spec.job_id = str(body["id"])
        return body

    async def cancel(self, spec: Spec) -> None:
        await self.retry(
            lambda: self.http.post(f"/v1/jobs/{spec.job_id}/cancel"),
            (202, 409),
            spec.cancel_statuses,
        )

    async def job(self, job_id: str) -> dict[str, Any] | None:
        """GET /v1/jobs/{id}: the job, or None on 404 (retried on errors)."""
        seen: list[str] = []
        r = await self.retry(lambda: self.http.get(f"/v1/jobs/{job_id}"), (200, 404), seen)
        return dict(r.json()) if r.status_code == 200 else None

    async def close(self) -> None:
        await self.http.aclose()


class Workload:
    """Six users, each a closed loop: submit the next job once fewer than INFLIGHT of its jobs
    are active (a job to cancel in the personal queue: once its slots are all taken)."""

    def __init__(self, url: str, rng: random.Random) -> None:
        self.rng = rng
        self.clients = {u: Client(url, u) for u in (*USERS, "admin")}
        self.specs = {u: specs_for(u, random.Random(rng.random())) for u in USERS}
        self.accepted: list[Spec] = []
        self.accepted_event = asyncio.Event()
        self.cancel_tasks: list[asyncio.Task[None]] = []
        self.cancel_missed: list[str] = []  # cancel_running jobs that ended before running
        self.canaries: list[Spec] = []

    @property
    def all_specs(self) -> list[Spec]:
        jobs = [s for u in USERS for s in self.specs[u]] + self.canaries
        return [s for s in jobs if s.job_id is not None]

    async def run(self) -> None:
        await asyncio.gather(*(self._user(u) for u in USERS))
        await asyncio.gather(*self.cancel_tasks)

    async def _active(self, user: str) -> tuple[int, int]:
        """(slot-holding, all active) jobs of `user` in the API (S1)."""
        seen: list[str] = []
        r = await self.clients[user].retry(
            lambda: self.clients[user].http.get(
                "/v1/jobs", params={"state": ",".join(ACTIVE), "user": user, "limit": 100}
            ),
            (200,),
            seen,
        )
        states = [j["state"] for j in r.json()["jobs"]]
        return sum(st != "PERSONAL_QUEUE_WAIT" for st in states), len(states)

    async def _until(self, user: str, ok: Callable[[int, int], bool], bound: float = 60.0) -> None:
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline and not ok(*await self._active(user)):
            await asyncio.sleep(0.5)

    async def _user(self, user: str) -> None:
        """The regular jobs in order; the one to cancel in the personal queue goes in as soon as
        a submission leaves the user's slots all taken (Q5), else at the end."""
        await asyncio.sleep(self.rng.uniform(0, 1.0))  # not all six at the same instant
        deferred = [s for s in self.specs[user] if s.kind == "cancel_queued"]
        for spec in [s for s in self.specs[user] if s.kind != "cancel_queued"]:
            await self._until(user, lambda _, active: active < INFLIGHT)
            await self._submit(spec)
            if deferred and (await self._active(user))[0] >= MAX_ACTIVE_JOBS:
                await self._submit(deferred.pop())
        for spec in deferred:
            await self._until(user, lambda slots, _: slots >= MAX_ACTIVE_JOBS, bound=20.0)
            await self._submit(spec)

    def canary(self) -> Spec:
        """A `true` job the admin submits to see the platform accept work again."""
        i = len(self.canaries)
        body = {"name": f"cs-canary-{i}", "command": LAUNCH_MARK + "true", "num_gpus": 1}
        spec = Spec("canary", "admin", body, key=f"crash-{SEED}-canary-{i}")
        self.canaries.append(spec)
        return spec

    async def _submit(self, spec: Spec) -> None:
        client = self.clients[spec.user]
        await client.submit(spec)
        self.accepted.append(spec)
        if len(self.accepted) >= 6:
            self.accepted_event.set()
        if spec.kind == "cancel_queued":
            await client.cancel(spec)
        elif spec.kind == "cancel_running":
            self.cancel_tasks.append(asyncio.create_task(self._cancel_when_running(spec)))

    async def _cancel_when_running(self, spec: Spec) -> None:
        client = self.clients[spec.user]
        assert spec.job_id is not None
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline:
            job = await client.job(spec.job_id)
            if job is not None and job["state"] == "RUNNING":
                break
            if job is not None and job["state"] in TERMINAL:
                self.cancel_missed.append(spec.job_id)
                return
            await asyncio.sleep(0.25)
        await client.cancel(spec)

    async def wait_terminal(self, timeout: float) -> list[str]:
        """Until every accepted job is terminal in the API; the ids still active on timeout."""
        left = list(self.accepted)
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            still = []
            for s in left:
                assert s.job_id is not None
                job = await self.clients[s.user].job(s.job_id)
                if job is None or job["state"] not in TERMINAL:
                    still.append(s)
            left = still
            if left:
                await asyncio.sleep(0.5)
        return [str(s.job_id) for s in left]

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()


# --- probes: the platform answers, the log moves, the views follow -------------------------------


class Probe:
    def __init__(self, stack: Stack, bus: EventBus, dsn: str) -> None:
        self.stack, self.bus, self.dsn = stack, bus, dsn
        self.http = httpx.AsyncClient(base_url=stack.url, timeout=3.0)

    async def ready(self) -> bool:
        try:
            r = await self.http.get("/readyz")
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    async def last_seq(self) -> int | None:
        try:
            return await asyncio.wait_for(self.bus.last_seq(), 2.0)
        except Exception:
            return None

    async def positions(self) -> dict[str, int] | None:
        try:
            conn = await asyncpg.connect(self.dsn, timeout=2.0)
        except Exception:
            return None
        try:
            rows = await conn.fetch("SELECT projection, last_seq FROM projection_positions")
            return {r["projection"]: int(r["last_seq"]) for r in rows}
        except Exception:
            return None
        finally:
            await conn.close()

    async def applied(self, seq: int) -> bool:
        """Every projection applied `seq` (the jobs view, the pool, usage …)."""
        pos = await self.positions()
        return pos is not None and all(pos.get(p, 0) >= seq for p in PROJECTIONS)

    def current_pid(self, name: str) -> int | None:
        pids = self.stack.service_pids(name)
        return pids[-1] if pids and alive(pids[-1]) else None

    def logged_ready(self, name: str, since: float) -> bool:
        path = self.stack.data_dir / "logs" / f"{name}.log"
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return False
        for line in text.splitlines()[::-1]:
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("ts", 0) < since:
                return False
            if str(entry.get("msg", "")).startswith(READY[name]):
                return True
        return False

    async def until(
        self, cond: Callable[[], Awaitable[bool]], bound: float, every: float = 0.05
    ) -> float | None:
        """Seconds until `cond()` held (polled every `every` s), None if not within `bound`."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < bound:
            if await cond():
                return time.monotonic() - t0
            await asyncio.sleep(every)
        return None

    async def close(self) -> None:
        await self.http.aclose()


class Triggers:
    """Fires a fault the moment an event of a given type is appended (a plain NATS subscription
    on the event subjects sees each append within milliseconds), or a random moment up to
    `within_s` later, so that kills land at every step of what that event sets off."""

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self.waiting: list[tuple[frozenset[str], Callable[[], None], asyncio.Future[str]]] = []
        self.delays: dict[asyncio.Future[str], float] = {}

    async def start(self) -> None:
        await self.bus.nc.subscribe(f"{self.bus.prefix}.>", cb=self._on)

    async def _on(self, msg: Any) -> None:
        if not self.waiting:
            return
        try:
            kind = type(decode(msg.data)).__name__
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        for entry in list(self.waiting):
            types, act, fut = entry
            if kind in types and not fut.done():
                self.waiting.remove(entry)
                delay = self.delays.pop(fut, 0.0)

                said = f"{kind} +{delay * 1000:.0f} ms" if delay else kind
                if delay:
                    asyncio.get_running_loop().call_later(delay, self._fire, act, fut, said)
                else:
                    self._fire(act, fut, said)

    @staticmethod
    def _fire(act: Callable[[], None], fut: asyncio.Future[str], said: str) -> None:
        try:
            act()
        finally:
            if not fut.done():
                fut.set_result(said)

    async def after(
        self,
        types: frozenset[str] | None,
        act: Callable[[], None],
        rng: random.Random,
        within_s: float = 0.0,
    ) -> str:
        if types is None:
            await asyncio.sleep(rng.uniform(0.0, 1.5))  # the random moment is the fault itself
            act()
            return "at random"
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        entry = (types, act, fut)
        self.delays[fut] = rng.uniform(0.0, within_s)
        self.waiting.append(entry)
        try:
            return "after " + await asyncio.wait_for(asyncio.shield(fut), TRIGGER_BOUND_S)
        except TimeoutError:
            if entry not in self.waiting:  # matched: it fires after its delay
                return "after " + await fut
            self.waiting.remove(entry)
            self.delays.pop(fut, None)
            act()
            return f"at random (no {'/'.join(sorted(types))} within {TRIGGER_BOUND_S:.0f} s)"


class Faults:
    def __init__(
        self, stack: Stack, servers: Servers, probe: Probe, rng: random.Random, wl: Workload
    ) -> None:
        self.stack, self.servers, self.probe, self.rng, self.wl = stack, servers, probe, rng, wl
        self.triggers = Triggers(probe.bus)
        self.done: list[Fault] = []

    async def run(self, plan: Plan) -> list[Fault]:
        await self.triggers.start()
        for what, target, types, within_s in plan:
            if what == "kill":
                fault = await self._kill(target, types, within_s)
            elif what == "kill-after-spawn":
                fault = await self._kill_agent_after_spawn()
            elif what == "nats":
                nats = self.servers.nats
                fault = await self._server("nats-kill", types, within_s, nats.kill, nats.start, 0.5)
            else:
                pg = self.servers.pg
                fault = await self._server(
                    "postgres-immediate", types, within_s, pg.stop_immediate, pg.start, 1.0
                )
            self.done.append(fault)
            print(f"fault {fault.kind:<20} {fault.trigger:<32} recovered in {fault.recovered_s}")
            # the next fault once the platform moved on: a few more events in the log
            await self._log_moves_on(5, bound=5.0)
        return self.done

    async def _log_moves_on(self, events: int, bound: float) -> None:
        target = (await self.probe.last_seq() or 0) + events

        async def moved() -> bool:
            last = await self.probe.last_seq()
            return last is not None and last >= target

        await self.probe.until(moved, bound)

    async def _kill(self, target: str, types: frozenset[str] | None, within_s: float) -> Fault:
        """SIGKILL one service process (`all`: every one at once, like a host losing them)."""
        names = list(READY) if target == "all" else [target]
        pids = {name: await self._wait_pid(name) for name in names}
        killed_at: list[float] = []

        def act() -> None:
            killed_at.append(time.time())
            for pid in pids.values():
                with contextlib.suppress(ProcessLookupError):  # it may have died on its own
                    os.kill(pid, signal.SIGKILL)

        trigger = await self.triggers.after(types, act, self.rng, within_s)
        fault = Fault(f"kill:{target}", trigger, killed_at[0])
        return await self._recovered(fault, pids)

    async def _kill_agent_after_spawn(self) -> Fault:
        """SIGKILL the slurm-agent the moment the backend has spawned an attempt's process,
        before it can have recorded the pid: the crash point of the bug this test found
        (tests/integration/test_local_spawn_crash.py)."""
        pid = await self._wait_pid("slurm_agent")
        before: set[int] = set()  # its children (running attempts) when the dispatch landed
        t0: list[float] = []

        def dispatched() -> None:  # in the NATS callback: the agent has not launched yet
            t0.append(time.monotonic())
            before.update(agent_children(pid))

        trigger = await self.triggers.after(frozenset({"JobDispatched"}), dispatched, self.rng)
        spawned = await asyncio.to_thread(kill_on_new_child, pid, before, 3.0)
        how = f"right after a spawn ({trigger}, +{(time.monotonic() - t0[0]) * 1000:.0f} ms)"
        fault = Fault("kill:slurm_agent", how if spawned else f"{trigger}, no spawn", time.time())
        return await self._recovered(fault, {"slurm_agent": pid})

    async def _recovered(self, fault: Fault, pids: dict[str, int]) -> Fault:
        """Until every killed service's replacement serves again (see the module doc)."""
        fault.seq_at = await self._seq_now()
        t_mono = time.monotonic() - (time.time() - fault.at)

        async def back() -> bool:
            for name, pid in pids.items():
                new = self.probe.current_pid(name)
                if new is None or new == pid or not self.probe.logged_ready(name, fault.at):
                    return False
            if "gateway" in pids:  # the projector: it applied what was appended by the kill
                return await self.probe.ready() and await self.probe.applied(fault.seq_at)
            return True

        took = await self.probe.until(back, RECOVERY_BOUND_S)
        fault.recovered_s = None if took is None else time.monotonic() - t_mono
        return fault

    async def _server(
        self,
        kind: str,
        types: frozenset[str] | None,
        within_s: float,
        down: Callable[[], subprocess.Popen[bytes] | None],
        up: Callable[[], Any],
        down_s: float,
    ) -> Fault:
        at: list[float] = []
        killed: list[subprocess.Popen[bytes] | None] = []

        def act() -> None:  # signals only: it runs in the NATS callback
            at.append(time.time())
            killed.append(down())

        trigger = await self.triggers.after(types, act, self.rng, within_s)
        t_mono = time.monotonic() - (time.time() - at[0])
        fault = Fault(kind, trigger, at[0], down_s=down_s)
        await asyncio.to_thread(wait_exited, killed[0])
        await asyncio.sleep(down_s)  # the outage itself: the server stays down this long
        await asyncio.to_thread(up)
        canary = self.wl.canary()
        admin = self.wl.clients["admin"]

        async def back() -> bool:
            """The platform accepts a job again and its view shows it (read-your-writes: the
            201 came once the jobs projection applied the JobSubmitted), and /readyz is 200."""
            body = await admin.try_submit(canary)
            return body is not None and not body.get("projection_lag") and await self.probe.ready()

        took = await self.probe.until(back, RECOVERY_BOUND_S, every=0.1)
        fault.recovered_s = None if took is None else time.monotonic() - t_mono
        if canary.job_id is None:  # never answered: learn whether it landed (Q6 replay)
            await admin.submit(canary)
        self.wl.accepted.append(canary)
        return fault

    async def _wait_pid(self, name: str) -> int:
        async def running() -> bool:
            return self.probe.current_pid(name) is not None

        assert await self.probe.until(running, RECOVERY_BOUND_S) is not None, f"{name} not running"
        pid = self.probe.current_pid(name)
        assert pid is not None
        return pid

    async def _seq_now(self) -> int:
        for _ in range(100):
            seq = await self.probe.last_seq()
            if seq is not None:
                return seq
            await asyncio.sleep(0.1)
        return 0


def agent_children(pid: int) -> set[int]:
    """Children of a process's main thread (where asyncio spawns subprocesses)."""
    try:
        return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def kill_on_new_child(pid: int, before: set[int], bound_s: float) -> bool:
    """SIGKILL `pid` the instant its main thread has a child not in `before` (spinning: a
    thread, microseconds after the fork); True if one came within `bound_s`, else kill anyway.
    The agent's children are the attempts it launches and, with fresh accounts, their useradd
    (which the supervisor's kill of the dead agent's group must not take with it)."""
    path = f"/proc/{pid}/task/{pid}/children"
    deadline = time.monotonic() + bound_s
    found = False
    while not found and time.monotonic() < deadline:
        try:
            with open(path) as f:
                found = bool({int(c) for c in f.read().split()} - before)
        except OSError:
            break
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return found


# --- the checks ----------------------------------------------------------------------------------


async def read_log(bus: EventBus, have: list[Delivered]) -> list[Delivered]:
    start = have[-1].seq + 1 if have else 1
    have.extend([d async for d in bus.replay(start_seq=start)])
    return have


def outcome_violations(wl: Workload, check: LogCheck, config: Config) -> list[str]:
    """What each kind of job must end as, crashes or not (X5, X6, X7, X8, Q5)."""
    vram = {t.name: t.vram_gb for t in config.tiers}
    bad = []
    for s in wl.all_specs:
        assert s.job_id is not None
        job = check.state.jobs.get(s.job_id)
        if job is None:
            continue  # reported by compare_api
        end = job.last_end
        got = (job.state, job.attempt, end.exit_code if end else None)
        want: tuple[str, int, int | None] | None = None
        if s.kind in ("short", "two", "canary"):
            want = ("COMPLETED", 1, 0)
        elif s.kind == "fail":
            want = ("FAILED", 1, 3)
        elif s.kind == "oom":
            first = next(
                (d.event for d in check.jobs[s.job_id] if isinstance(d.event, JobDispatched)),
                None,
            )
            bigger = first is not None and any(v > vram[first.tier] for v in vram.values())
            want = ("COMPLETED", 2, 0) if bigger else ("FAILED", 1, 1)
        elif s.kind == "cancel_queued" and job.state != "CANCELLED":
            bad.append(f"{s.job_id} (cancelled): {job.state}")
        elif s.kind == "cancel_running" and s.job_id not in wl.cancel_missed:
            ok = job.state == "CANCELLED" and job.cancel_from == "RUNNING"
            bad += (
                [] if ok else [f"{s.job_id} (cancel running): {job.state} from {job.cancel_from}"]
            )
        if want is not None and got != want:
            bad.append(f"{s.job_id} ({s.kind}): ended {got}, expected {want}")
    return bad


def launch_violations(stack: Stack, check: LogCheck) -> list[str]:
    """O5 and R2 at the execution level, from what the jobs' processes left behind: no attempt
    ran twice; one the log says ran to its end ran; one the log never started did not run (X6:
    the log records every start; a cancelled attempt may have been stopped before its script's
    first line); and no two jobs' processes ran on one GPU at the same time — each run from its
    first line to its wrapper's exit status (or, killed, the attempt's JobEnded)."""
    bad = []
    runs_on: dict[tuple[str, str, int], list[tuple[float, float, str]]] = {}
    status_dir = stack.data_dir / "local-backend" / "jobs"
    for job_id, events in check.jobs.items():
        started = {d.event.attempt for d in events if isinstance(d.event, JobStarted)}
        ended = {d.event.attempt: d.event for d in events if isinstance(d.event, JobEnded)}
        for d in events:
            if not isinstance(d.event, JobDispatched):
                continue
            attempt = d.event.attempt
            path = stack.output_dir(job_id, attempt) / "launches"
            lines = path.read_text().splitlines() if path.exists() else []
            end = ended.get(attempt)
            end_state = end.state if end else None
            ran_to_end = attempt in started and end_state in ("COMPLETED", "FAILED")
            if lines and end is not None and end.reason == "never started":
                bad.append(f"{job_id}: attempt {attempt} ran, but its JobEnded says never started")
            if len(lines) > 1 or (not lines and ran_to_end) or (lines and attempt not in started):
                err = stack.output_dir(job_id, attempt) / "stderr"
                said = err.read_text(errors="replace")[-400:].strip() if err.exists() else None
                bad.append(
                    f"{job_id}: attempt {attempt} executed {len(lines)} times (JobStarted: "
                    f"{attempt in started}, ended {end_state}, exit "
                    f"{end.exit_code if end else None}, stderr {said!r})"
                )
            status = status_dir / f"local-{job_id}-{attempt}.status"
            for line in lines:
                began = float(line.split()[1])
                until = status.stat().st_mtime if status.exists() else (end.ts if end else 1e12)
                for g in d.event.gpus:
                    key = (d.event.node, d.event.tier, g)
                    runs_on.setdefault(key, []).append((began, until, f"{job_id}/{attempt}"))
    for gpu, runs in sorted(runs_on.items()):
        runs.sort()
        busy_until, holder = 0.0, ""
        for began, stopped, who in runs:
            if began < busy_until - HELD_SLACK_S:
                bad.append(f"GPU {gpu}: {who} ran while {holder} still ran (R2, P3)")
            if stopped > busy_until:
                busy_until, holder = stopped, who
    return bad


async def run_replay(stack: Stack, config: Config) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "jpu.tools.replay",
        "--nats", config.nats_url, "--db", config.database_url,
        "--stream", config.stream_name, "--prefix", config.subject_prefix,
        env=stack.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 180)
    return int(proc.returncode or 0), out.decode(errors="replace")


def unprompted_restarts(stack: Stack, faults: list[Fault]) -> Counter[str]:
    """Services that exited without being killed by the test (e.g. on a server outage)."""
    killed = Counter(
        name
        for f in faults
        if f.kind.startswith("kill:")
        for name in (READY if f.kind == "kill:all" else [f.kind.removeprefix("kill:")])
    )
    exits = Counter(
        e["child"] for e in stack.supervisor_log() if e.get("msg") == "service exited; restarting"
    )
    return Counter({k: n - killed.get(k, 0) for k, n in exits.items() if n > killed.get(k, 0)})


@dataclass
class Verdict:
    log: list[Delivered]
    check: LogCheck
    accepted: set[str]  # the job ids the workload's submits got
    violations: list[str]
    replay_out: str


async def verify(
    stack: Stack, config: Config, bus: EventBus, probe: Probe, wl: Workload, stuck: list[str]
) -> Verdict:
    """Once the workload is over: wait until every charge the log owes is written and every
    projection is at the log's end, then check the log's invariants, the API against the log's
    fold, each job's outcome and launches, projection faults, parked messages and
    `python -m jpu.tools.replay` (E3, E6, F5, O5, S2)."""
    log: list[Delivered] = []

    async def settled() -> bool:
        await read_log(bus, log)
        check = check_log(log, config)
        owed_open = set(check.owed) - set(check.charged)
        return not owed_open and await probe.applied(log[-1].seq)

    settle_s = await probe.until(settled, 60.0, every=0.3)
    await read_log(bus, log)
    check = check_log(log, config)
    accepted = {str(s.job_id) for s in wl.accepted}
    owners = {str(s.job_id): s.user for s in wl.accepted}
    api_jobs = {}
    for job_id in sorted(accepted | set(check.state.jobs)):
        client = wl.clients[owners.get(job_id, "bcg-alice")]
        api_jobs[job_id] = await client.job(job_id)
    labs_body = await wl.clients["bcg-alice"].http.get("/v1/labs")
    api_labs = {lab["lab"]: lab for lab in labs_body.json()["labs"]}
    api_bad = compare_api(check, api_jobs, api_labs, accepted)
    outcome_bad = outcome_violations(wl, check, config) + launch_violations(stack, check)
    conn = await asyncpg.connect(config.database_url)
    try:  # events a live projection could not apply (E3): must be none
        live_faults = await conn.fetch(
            "SELECT projection, seq, event_type, error FROM projection_faults"
        )
    finally:
        await conn.close()
    parked = await bus.parked()
    replay_rc, replay_out = await run_replay(stack, config)
    violations = (
        [f"not terminal after {TERMINAL_BOUND_S:.0f} s: {stuck}"] * bool(stuck)
        + ["not settled (charges owed / projections behind) within 60 s"] * (settle_s is None)
        + check.violations
        + api_bad
        + outcome_bad
        + [f"projection fault: {dict(r)}" for r in live_faults]
        + [f"parked message: {p}" for p in parked]
        + ([f"python -m jpu.tools.replay exited {replay_rc}:\n{replay_out}"] if replay_rc else [])
    )
    return Verdict(log, check, accepted, violations, replay_out)


# --- the test ------------------------------------------------------------------------------------

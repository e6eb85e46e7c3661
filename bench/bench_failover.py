"""Failover times: stream-leader loss on a 3-node JetStream cluster (how long until the next
append is accepted), and dispatcher-leader loss (how long until the standby dispatches).

    python bench/bench_failover.py [--rounds 5] [--stop]
    python bench/bench_failover.py --dispatcher [--rounds 5]
    python bench/bench_failover.py --platform [--rounds 3]

A 3-node cluster from the project's nats-server, the event stream with 3 replicas. Each round:
SIGKILL the node leading the stream (or, with --stop, stop it with SIGTERM; with --freeze,
SIGSTOP it: alive but silent, its sockets stay open, as when a host is lost), then time one plain
`EventBus.append` from a client connected to that very node (it resends while no leader answers,
SPEC O3; with --freeze it must first notice the dead connection by its pings) until it is
accepted, and the
time until an ordered reader (jpu.bus.ordered, what every service's fold and the projections use)
hands that event out; restart (or thaw) the node on its store and wait until it is a current
replica again.
Prints each round, the medians and the maxima.

--dispatcher: a stack on one NATS server (gateway, intake, slurm-agent on the local backend,
accounting) and two dispatcher processes started here, one leading, one standby (SPEC E4). Each
round: a job is dispatched (the leader is active), the leader is SIGKILLed and a job is submitted
at once; measured from the kill to that job's `JobDispatched` (its event time, written by the new
leader) and to the standby's "leading" line. The killed dispatcher is started again as the next
standby. The bound is the lease: TTL 3 s, renewed every 1 s (jpu_services.dispatcher.lease).

--platform: the whole platform (every service, as `make cluster` runs it) on a 3-node cluster, the
event stream with 3 replicas. Each round SIGKILLs the node leading the stream and
measures, side by side from the kill:
  * the bus's own first append: the same event published raw every 0.05 s, the earlier tries
    left out, no pacing of ours, from a client of the lost node and from one of a surviving
    node (the earlier of the two is the bus's figure);
  * the first submit the gateway accepts over REST, a new try every 0.1 s (each its own job);
  * one client's submit, sent at the kill and resent 0.05 s after each refusal (as
    tests/e2e/test_cluster_faults.py probes);
  * the first `JobDispatched` stored after the kill (its store time in the stream);
and the differences from the bus's first append (SPEC O3: the platform follows its bus).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
from stackbench import BenchStack

from jpu.bus import EventBus
from jpu.bus.errors import is_unreachable
from jpu.bus.ordered import follow_ordered
from jpu.bus.reader import read_range
from jpu.config import load_config
from jpu.events import JobPromoted, NotificationSettingsChanged, decode, encode, new_event_id
from jpu.stack.supervisor import SERVICES
from jpu.testing.nats_cluster import NatsCluster, stream_leader, wait_jetstream


def promoted(i: int) -> JobPromoted:
    return JobPromoted(
        event_id=new_event_id(), ts=float(i), job_id=f"job-{i}", queue_entered_at=1.0
    )


async def current(bus: EventBus, node: str) -> None:
    while True:
        try:
            info = await bus.js.stream_info(bus.stream)
            if any(
                p.name == node and p.current for p in (info.cluster and info.cluster.replicas) or []
            ):
                return
        except Exception:
            pass
        await asyncio.sleep(0.2)


async def run(rounds: int, how: str) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = NatsCluster(Path(tmp))
        cluster.start()
        try:
            await wait_jetstream(cluster.urls)
            bus = await EventBus.connect(cluster.urls, stream="BENCH", prefix="bench", replicas=3)
            await bus.ensure_stream()
            seen: dict[int, float] = {}
            stop = asyncio.Event()

            async def follow() -> None:
                async for msgs in follow_ordered(bus.js, bus.stream, "bench.>", 1, stop):
                    for m in msgs:
                        seen[m.metadata.sequence.stream] = time.monotonic()

            reader = asyncio.create_task(follow())
            took: list[tuple[float, float]] = []
            for i in range(rounds):
                await bus.append(promoted(i))
                node = await stream_leader(bus.js, bus.stream)
                # The appending client is connected to the node that is lost (the worst case).
                lost = cluster.node(node)
                others = [n.url for n in cluster.nodes.values() if n is not lost]
                writer = await EventBus.connect(
                    ",".join([lost.url, *others]), stream="BENCH", prefix="bench", randomize=False
                )
                await writer.append(promoted(500 + i))  # connected, to the node still leading
                if how == "stop":
                    await asyncio.to_thread(lost.stop)
                elif how == "freeze":  # alive but silent: no socket closes (a host lost)
                    lost.freeze()
                else:
                    await asyncio.to_thread(cluster.kill, node)
                t0 = time.monotonic()
                event = promoted(1000 + i)
                try:
                    seq = await writer.append(event)
                except Exception as e:  # no leader within ELECTION_S: say so, keep measuring
                    if not is_unreachable(e):
                        raise
                    print(f"round {i + 1}: append gave up after {time.monotonic() - t0:.2f} s")
                    seq = await writer.append_retrying(event)  # same event, same msg id
                appended = time.monotonic() - t0
                await writer.close()
                while seq not in seen:
                    await asyncio.sleep(0.02)
                took.append((appended, seen[seq] - t0))
                print(
                    f"round {i + 1}: leader {node} lost -> append accepted in {appended:.2f} s, "
                    f"read by an ordered reader in {took[-1][1]:.2f} s"
                )
                if how == "freeze":  # thawed, it finds it lost its leadership
                    lost.freeze(False)
                else:
                    await asyncio.to_thread(lost.start)
                await asyncio.wait_for(current(bus, node), 60)
            stop.set()
            await reader
            await bus.close()
            return took
        finally:
            cluster.stop()


USERS = ("bcg-alice", "kdg-carol", "osl-erin")


def _leading(log: Path) -> list[float]:
    """Times at which the dispatcher writing `log` logged taking the lead."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("msg") == "leading":
                out.append(float(entry["ts"]))
    return out


async def _until(cond: Callable[[], Awaitable[bool]], bound_s: float, what: str) -> None:
    deadline = time.monotonic() + bound_s
    while not await cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {bound_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.02)


async def dispatcher_rounds(rounds: int) -> list[tuple[float, float]]:
    services = ("gateway", "intake", "slurm_agent", "accounting")
    async with BenchStack(services, {"JPU_CYCLE_S": "0.5", "JPU_GATEWAY_WORKERS": "1"}) as st:
        logs = st.root / "logs"
        procs: dict[str, subprocess.Popen[bytes]] = {}

        def start(name: str) -> None:
            with open(logs / f"{name}.log", "ab") as out:
                procs[name] = subprocess.Popen(
                    [sys.executable, "-P", "-m", "jpu_services.dispatcher"],
                    env={**st.env, "PYTHONUNBUFFERED": "1"},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                )

        def leader() -> str | None:
            latest = {n: max(_leading(logs / f"{n}.log"), default=0.0) for n in procs}
            name = max(latest, key=lambda n: latest[n])
            return name if latest[name] > 0 and procs[name].poll() is None else None

        async with httpx.AsyncClient(base_url=st.url, timeout=30) as http:
            turn = iter(range(10**6))

            async def submit() -> str:
                user = USERS[next(turn) % len(USERS)]
                r = await http.post(
                    "/v1/jobs",
                    json={"name": "failover", "command": "true", "num_gpus": 1},
                    headers={"Authorization": f"Bearer demo-{user}"},
                )
                r.raise_for_status()
                return f"{r.json()['id']} {user}"

            async def dispatched_at(ref: str) -> float | None:
                job_id, user = ref.split()
                r = await http.get(
                    f"/v1/jobs/{job_id}/events", headers={"Authorization": f"Bearer demo-{user}"}
                )
                ts = [e["ts"] for e in r.json()["events"] if e["type"] == "JobDispatched"]
                return float(ts[0]) if ts else None

            async def has_leader() -> bool:
                return leader() is not None

            async def is_dispatched(ref: str) -> bool:
                return await dispatched_at(ref) is not None

            try:
                start("dispatcher-a")
                await _until(has_leader, 30, "a leading dispatcher")
                start("dispatcher-b")
                took: list[tuple[float, float]] = []
                for i in range(rounds):
                    await asyncio.sleep(2.0)  # the new standby connects and tries the lease
                    warm = await submit()
                    await _until(lambda w=warm: is_dispatched(w), 30, "a dispatch by the leader")
                    name = leader()
                    assert name is not None
                    standby = next(n for n in procs if n != name)
                    before = len(_leading(logs / f"{standby}.log"))
                    os.kill(procs[name].pid, signal.SIGKILL)
                    killed = time.time()
                    procs[name].wait()
                    job = await submit()
                    await _until(lambda j=job: is_dispatched(j), 60, "the standby's dispatch")
                    at = await dispatched_at(job)
                    assert at is not None
                    led = _leading(logs / f"{standby}.log")
                    assert len(led) > before, f"{standby} did not take the lead"
                    took.append((led[-1] - killed, at - killed))
                    print(
                        f"round {i + 1}: {name} SIGKILLed -> {standby} leading after "
                        f"{took[-1][0]:.2f} s, first dispatch after {took[-1][1]:.2f} s"
                    )
                    start(name)  # back as the standby
                return took
            finally:
                for p in procs.values():
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
                for p in procs.values():
                    try:
                        p.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()


PROBE_EVERY_S = 0.1  # a new submit try this often while none was accepted
PROBE_BUS_S = 0.05  # a new raw publish this often while none was acknowledged
PLATFORM_BOUND_S = 60.0


async def platform_rounds(rounds: int, keep_logs: Path | None) -> list[dict[str, float]]:
    """See --platform in the module's docstring. Each round: {what: seconds from the kill}.
    With `keep_logs`, the services' logs are copied there (where the time went)."""
    async with BenchStack(SERVICES, dict(PLATFORM_ENV), cluster=True) as st:
        config = load_config(env=st.env)
        assert isinstance(st.nats, NatsCluster)
        bus = await EventBus.connect(
            config.nats_url, stream=config.stream_name, prefix=config.subject_prefix, name="bench"
        )
        out: list[dict[str, float]] = []
        try:
            async with httpx.AsyncClient(base_url=st.url, timeout=30) as http:
                submitter = _Submitter(http)
                for i in range(rounds):
                    took = await _platform_round(i, st.nats, bus, submitter)
                    out.append(took)
        finally:
            await bus.close()
            if keep_logs is not None:
                shutil.copytree(st.root / "logs", keep_logs, dirs_exist_ok=True)
        return out


class _Submitter:
    """Submits over REST as the demo users in turn; True when accepted (200/201)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http, self.turn = http, 0

    async def __call__(self, timeout: float) -> bool:
        self.turn += 1
        user = USERS[self.turn % len(USERS)]
        try:
            r = await self.http.post(
                "/v1/jobs",
                json={"name": "failover", "command": "true", "num_gpus": 1},
                headers={"Authorization": f"Bearer demo-{user}"},
                timeout=timeout,
            )
        except httpx.TransportError:
            return False
        return r.status_code in (200, 201)


def _probe_event() -> NotificationSettingsChanged:
    """An event no job depends on (a made-up user's notification settings; the notifier folds
    them, nothing else): the bus's own appends go to the platform's stream without touching it."""
    return NotificationSettingsChanged(
        event_id=new_event_id(), ts=time.time(), user=f"bench-probe-{new_event_id()[:8]}"
    )


async def _bus_first_append(writer: EventBus, t0: float) -> float:
    """The servers' own time: the same event (same msg id) published raw every PROBE_BUS_S,
    each try bounded by 1 s and the earlier ones left out, until the first ack — no client pacing
    of ours in between. Seconds from `t0`."""
    event = _probe_event()
    subject, data = f"{writer.prefix}.user.{event.user}", encode(event)
    headers = {"Nats-Msg-Id": event.event_id}

    async def publish() -> bool:
        try:
            await writer.js.publish(
                subject, data, headers=headers, stream=writer.stream, timeout=1.0
            )
        except Exception:
            return False
        return True

    return await _overlapping(publish, PROBE_BUS_S, t0, "append")


async def _overlapping(
    attempt: Callable[[], Coroutine[Any, Any, bool]], every: float, t0: float, what: str
) -> float:
    """A new `attempt` every `every` seconds, the earlier ones left out, until one returns True;
    seconds from `t0` to that."""
    tries: set[asyncio.Task[bool]] = set()
    try:
        while time.monotonic() - t0 < PLATFORM_BOUND_S:
            tries.add(asyncio.create_task(attempt()))
            done, _ = await asyncio.wait(tries, timeout=every)
            tries -= done
            if any(t.result() for t in done):
                return time.monotonic() - t0
        raise RuntimeError(f"no {what} accepted within {PLATFORM_BOUND_S:.0f} s")
    finally:
        for t in tries:
            t.cancel()
        await asyncio.gather(*tries, return_exceptions=True)


async def _first_accepted(submit: _Submitter, t0: float) -> float:
    """A new submit try every PROBE_EVERY_S (each its own job, left running) until one is
    accepted; seconds from `t0` to that answer."""
    return await _overlapping(lambda: submit(PLATFORM_BOUND_S), PROBE_EVERY_S, t0, "submit")


async def _client_accepted(submit: _Submitter, t0: float) -> float:
    """One client as tests/e2e/test_cluster_faults.py has it: a submit sent at the kill, waited
    for (up to 15 s), sent again 0.05 s after a refusal; seconds from `t0` to the first accepted."""
    while time.monotonic() - t0 < PLATFORM_BOUND_S:
        if await submit(15.0):
            return time.monotonic() - t0
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no submit accepted within {PLATFORM_BOUND_S:.0f} s")


async def _platform_round(
    i: int, nodes: NatsCluster, bus: EventBus, submit: _Submitter
) -> dict[str, float]:
    assert await submit(30), "the platform does not accept a submit"
    await asyncio.sleep(2.0)
    node = await stream_leader(bus.js, bus.stream)
    lost = nodes.node(node)
    others = [n.url for n in nodes.nodes.values() if n is not lost]
    writers = {
        "bus (client of the lost node)": ",".join([lost.url, *others]),
        "bus (client of a surviving node)": ",".join(others),
    }
    clients = {
        k: await EventBus.connect(url, stream=bus.stream, prefix=bus.prefix, randomize=False)
        for k, url in writers.items()
    }
    for c in clients.values():
        await c.append(_probe_event())  # connected, each to its first server
    seq_at = await bus.last_seq()
    await asyncio.to_thread(nodes.kill, node)
    t0, wall0 = time.monotonic(), time.time()
    got = await asyncio.gather(
        *(_bus_first_append(c, t0) for c in clients.values()),
        _first_accepted(submit, t0),
        _client_accepted(submit, t0),
    )
    took = dict(zip([*clients, "submit", "client"], got, strict=True))
    dispatched = await _first_stored(bus, seq_at, "JobDispatched", wall0)
    if dispatched is not None:
        took["dispatch"] = dispatched
    for c in clients.values():
        await c.close()
    took["bus"] = min(v for k, v in took.items() if k.startswith("bus "))
    print(
        f"round {i + 1}: leader {node} SIGKILLed -> "
        + ", ".join(f"{k} {v:.2f} s" for k, v in took.items() if k != "bus")
        + "; after the bus's first append: "
        + ", ".join(
            f"{k} {took[k] - took['bus']:+.2f} s"
            for k in ("submit", "client", "dispatch")
            if k in took
        ),
        flush=True,
    )
    await asyncio.to_thread(lost.start)
    await asyncio.wait_for(current(bus, node), 60)
    return took


PLATFORM_ENV = {"JPU_CYCLE_S": "0.5", "JPU_SUBMIT_RATE_PER_S": "0", "JPU_GATEWAY_WORKERS": "1"}


async def _first_stored(bus: EventBus, after_seq: int, kind: str, since: float) -> float | None:
    """Seconds from `since` (wall time) to the store time of the first `kind` event after
    `after_seq`, waiting up to PLATFORM_BOUND_S for one; None if none came."""
    deadline = time.monotonic() + PLATFORM_BOUND_S
    start = after_seq + 1
    while time.monotonic() < deadline:
        async for msg in read_range(bus.js, bus.stream, f"{bus.prefix}.>", start):
            start = msg.metadata.sequence.stream + 1
            stored = msg.metadata.timestamp.timestamp()
            if stored >= since and type(decode(msg.data)).__name__ == kind:
                return stored - since  # (one stored as the node was being killed is not it)
        await asyncio.sleep(0.2)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stop", action="store_true", help="SIGTERM instead of SIGKILL")
    parser.add_argument(
        "--freeze", action="store_true", help="SIGSTOP instead of SIGKILL (no socket closes)"
    )
    parser.add_argument(
        "--dispatcher", action="store_true", help="dispatcher leader SIGKILL -> standby"
    )
    parser.add_argument(
        "--platform",
        action="store_true",
        help="the whole platform on 3 nodes: bus append, accepted submit, dispatch side by side",
    )
    parser.add_argument("--keep-logs", type=Path, help="--platform: copy the services' logs here")
    args = parser.parse_args()
    if args.platform:
        rows = asyncio.run(platform_rounds(args.rounds, args.keep_logs))
        for what in ("bus", "submit", "client", "dispatch"):
            xs = [r[what] for r in rows if what in r]
            ds = [r[what] - r["bus"] for r in rows if what in r]
            label = {
                "bus": "bus's first append",
                "submit": "first accepted submit (a try every 0.1 s)",
                "client": "first accepted submit (one client, sent at the kill, resent at once)",
                "dispatch": "first dispatch",
            }[what]
            if xs:
                print(
                    f"stream leader SIGKILLed -> {label}: median {statistics.median(xs):.2f} s, "
                    f"max {max(xs):.2f} s; after the bus: median {statistics.median(ds):+.2f} s, "
                    f"max {max(ds):+.2f} s ({len(xs)} of {len(rows)} rounds)"
                )
        return 0
    if args.dispatcher:
        took = asyncio.run(dispatcher_rounds(args.rounds))
        for k, what in enumerate(("standby leading", "first dispatch by the standby")):
            xs = [t[k] for t in took]
            print(
                f"dispatcher leader SIGKILLed -> {what}: median {statistics.median(xs):.2f} s, "
                f"max {max(xs):.2f} s ({len(xs)} rounds)"
            )
        return 0
    mode = "stop" if args.stop else "freeze" if args.freeze else "kill"
    took = asyncio.run(run(args.rounds, mode))
    how = {"stop": "stopped (SIGTERM)", "freeze": "frozen (SIGSTOP)", "kill": "SIGKILLed"}[mode]
    for k, what in enumerate(("next append accepted", "read by an ordered reader")):
        xs = [t[k] for t in took]
        print(
            f"stream leader {how} -> {what}: median {statistics.median(xs):.2f} s, "
            f"max {max(xs):.2f} s ({len(xs)} rounds)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

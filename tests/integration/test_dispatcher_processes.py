"""The services as real processes: SIGKILL the leading dispatcher, the standby takes over
(SPEC E4, E5, O5). Intake, accounting and two dispatchers run as `python -m jpu_services.<x>`."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter

from jpu.bus import EventBus
from jpu.commands import SubmitCommand, decode_reply, encode, submit_subject
from jpu.config import load_config
from jpu.events import JobDispatched, UsageCharged
from jpu.runtime.clock import SystemClock
from jpu.testing.fold import Watcher, end_job, start_job

BODY = {"name": "train", "command": "python train.py", "num_gpus": 1}


def spawn(module: str, env: dict[str, str], logs) -> subprocess.Popen:
    log = open(logs / f"{module}-{len(list(logs.iterdir()))}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", f"jpu_services.{module}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )


async def submit(bus: EventBus, user: str) -> str:
    cmd = SubmitCommand(user=user, lab="BCG", body=BODY)
    for _ in range(100):  # until intake has started and subscribed
        try:
            msg = await bus.nc.request(submit_subject(bus.prefix), encode(cmd), timeout=1)
        except Exception:
            await asyncio.sleep(0.1)
            continue
        reply = decode_reply(msg.data)
        assert reply.status == 201, reply
        return reply.job_id
    raise TimeoutError("intake never answered")


async def leader_pid(bus: EventBus, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kv = await bus.js.key_value("jpu_leases")
            entry = await kv.get(f"dispatcher.{bus.stream}")
            if entry.value:
                return int(entry.value.decode().rsplit("-", 2)[1])  # host-pid-rand
        except Exception:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError("no dispatcher took the lease")


async def test_E4_O5_sigkill_of_the_leading_dispatcher_process(
    bus: EventBus, nats_url, pg_dsn, tmp_path
):
    env = dict(
        os.environ,
        JPU_NATS_URL=nats_url,
        JPU_DATABASE_URL=pg_dsn,
        JPU_STREAM_NAME=bus.stream,
        JPU_SUBJECT_PREFIX=bus.prefix,
        JPU_CYCLE_S="0.5",
        JPU_MIN_CYCLE_GAP_S="0.05",
        JPU_LOG_LEVEL="WARNING",
    )
    dispatchers = [spawn("dispatcher", env, tmp_path), spawn("dispatcher", env, tmp_path)]
    others = [spawn("intake", env, tmp_path), spawn("accounting", env, tmp_path)]
    procs = dispatchers + others
    config, clock = load_config(env={}), SystemClock()
    try:
        async with Watcher(bus, config) as w:
            first = [await submit(bus, u) for u in ("alice", "bob", "carol")]
            await w.until(lambda s: all(s.jobs[j].placement for j in first), timeout=30)
            pid = await leader_pid(bus)
            victim = next(p for p in dispatchers if p.pid == pid)
            os.kill(pid, signal.SIGKILL)  # no lease release: the standby waits out the TTL
            killed = time.monotonic()
            second = [await submit(bus, u) for u in ("dave", "erin", "frank")]
            await w.until(lambda s: all(s.jobs[j].placement for j in second), timeout=20)
            takeover = time.monotonic() - killed
            assert takeover < 8.0, takeover  # TTL 3 s + renew 1 s + a cycle
            assert victim.wait(5) == -signal.SIGKILL
            # accounting (a process too) charges an attempt's end once
            await start_job(bus, w.state, clock, first[0])
            await w.until(lambda s: s.jobs[first[0]].state == "RUNNING")
            await end_job(bus, w.state, config, clock, first[0])
            await w.until(lambda s: len(s.charged_ids) == 1, timeout=20)
        counts = Counter(
            [
                (d.event.job_id, d.event.attempt)
                async for d in bus.replay()
                if isinstance(d.event, JobDispatched)
            ]
        )
        assert set(counts) == {(j, 1) for j in first + second} and max(counts.values()) == 1
        charged = [d.event async for d in bus.replay() if isinstance(d.event, UsageCharged)]
        assert [c.job_id for c in charged] == [first[0]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(20))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
    # graceful stop of the survivors: SIGTERM → drain → exit 0
    assert [c for p, c in zip(procs, codes, strict=True) if p is not victim] == [0, 0, 0]

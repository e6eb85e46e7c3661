"""Backfill exactly once (SPEC B1–B3, E2, O5): two replicas, a restart, an orphaned instance."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

import asyncpg

from jpu.backends.backfill_contract import BackfillSpec
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.events import BackfillEnded, BackfillStarted
from jpu.testing.stack import NODE, TIER, Stack, another_backfill, start_stack
from jpu_services.backfill.options import BackfillStats


async def both_rounds(s: Stack, other: BackfillStats, n: int = 2) -> None:
    """Until both replicas have begun `n` more rounds: each ran one whole round on the log as
    it is now (a positive signal, not a pause)."""
    target = other.rounds + n
    await s.backfill_rounds(n)
    await s.until(lambda _: other.rounds >= target)


def stub_processes(data_dir: Path) -> set[int]:
    """Live backfill stub processes started for this stack (their cwd is under data_dir)."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if b"jpu.tools.backfill_stub" in cmdline and cwd.startswith(str(data_dir)):
            found.add(int(pid))
    return found


async def test_O5_second_replica_readopts_cancels_orphans_and_never_doubles(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with start_stack(nats_url, pool, pg_dsn) as s:
        await s.until(lambda st: len(st.backfill) == 2)
        recorded = set(s.state.backfill.values())
        # a crash between launch and BackfillStarted leaves an instance the log does not know
        crashed = LocalBackend(LocalSettings(data_dir=s.data_dir, nodes=list(s.config.nodes)))
        spec = BackfillSpec(
            backfill_id="bf-orphan", node=NODE, tier=TIER, gpu=0, command="sleep 60"
        )
        orphan = (await crashed.submit_backfill(spec)).backend_job_id
        await crashed.close()
        async with another_backfill(s) as other:  # the restarted service, next to the live one
            probe = LocalBackend(LocalSettings(data_dir=s.data_dir, nodes=list(s.config.nodes)))
            for _ in range(100):
                if orphan not in await probe.running_backfill():
                    break
                await asyncio.sleep(0.05)
            assert orphan not in await probe.running_backfill()  # the orphan is cancelled
            assert len(await probe.running_backfill()) == 2  # the recorded ones re-adopted
            await probe.close()
            await both_rounds(s, other)  # both replicas decided on the same log
            assert set(s.state.backfill.values()) == recorded
            # a dispatch preempts; the GPU frees; both replicas redeploy: still once each
            job = await s.submit("bcg-alice", "sleep 1")
            await s.until(lambda st: st.jobs[job].state == "COMPLETED", timeout=10)
            await s.until(
                lambda st: len(st.backfill) == 2 and set(st.backfill.values()) != recorded
            )
            await both_rounds(s, other)
            assert len(stub_processes(s.data_dir)) == 2  # one process per instance, no twins
        starts = Counter(e.backfill_id for e in await s.events(BackfillStarted))
        ends = Counter(e.backfill_id for e in await s.events(BackfillEnded))
        assert len(starts) == 3 and max(starts.values()) == 1  # no instance recorded twice
        assert len(ends) == 1 and max(ends.values()) == 1
        assert (
            Counter((e.node, e.gpu) for e in await s.events(BackfillStarted)).most_common(1)[0][1]
            == 2
        )

"""Watching many Slurm jobs cheaply (SPEC X9): the lean squeue listing, the shared cached listing
and the poll rounds of the agent's watch list. Literal lines as Slurm 22.05 prints them for
`squeue --noheader --states=all --Format=SQUEUE_FORMAT` with SLURM_TIME_FORMAT=%s."""

from __future__ import annotations

import asyncio
import time

from jpu.backends.slurm.listing import Listing, Named, NameLookup, note_ends
from jpu.backends.slurm.parse import (
    SQUEUE_FIELDS,
    SQUEUE_FORMAT,
    SQUEUE_NAMED_FORMAT,
    SlurmJob,
    named_states_from_squeue,
    states_from_squeue,
)
from jpu_services.slurm_agent.watchlist import WatchList, aligned

LISTING = """\
417|COMPLETING|None|jpu-alice|w1k-02|w1k-02|rtx4090|0|1795950720|1795950793|1795950718|
6|CANCELLED|None|root|w1k-01|w1k-01|rtx4090|36608|1795950709|1795950786|1795950708|
1001|PENDING|Resources|root||n/a|rtx4090|0|1795950799|NONE|1795950786|
1004|FAILED|NonZeroExitCode|jpu-bob|gpu-3080tix2-01|gpu-3080tix2-01|rtx3080ti|768|1795950800|1795950801|1795950799|
1005|RUNNING|None|jpu-bob|gpu-4090x2-01|gpu-4090x2-01|rtx4090|0|1795950800|1795954400|1795950799|
1_[5-999]|PENDING|Resources|root||n/a|rtx4090|0|0|NONE|1795950708|
1006|RUNNING|None|extra|field|w|w|rtx4090|0|1|2|3|
"""


def test_X9_lean_listing_asks_only_for_fields_slurm_writes() -> None:
    # no job name, comment or path: no job's own text can split or forge a line
    assert not {"Name", "Comment", "WorkDir", "STDOUT", "STDERR"} & set(SQUEUE_FIELDS)
    assert SQUEUE_FORMAT.startswith("JobID:|,State:|,") and SQUEUE_FORMAT.endswith("SubmitTime:|")


def test_X9_lean_listing_parses_states_nodes_exit_status_and_epochs() -> None:
    jobs = states_from_squeue(LISTING)
    assert sorted(jobs) == [6, 417, 1001, 1004, 1005]  # array range and malformed line skipped
    failed = jobs[1004]
    assert failed.backend_state == "FAILED" and failed.terminal
    assert failed.exit_status == 768 and failed.reason == "NonZeroExitCode"
    assert failed.node == "gpu-3080tix2-01" and failed.partition == "rtx3080ti"
    assert failed.user == "jpu-bob"
    assert (failed.start_time, failed.end_time, failed.submit_time) == (
        1795950800.0, 1795950801.0, 1795950799.0,
    )  # fmt: skip
    assert jobs[417].backend_state == "RUNNING" and not jobs[417].terminal  # COMPLETING
    assert jobs[6].exit_status == 36608 and jobs[6].backend_state == "CANCELLED"
    pending = jobs[1001]
    assert pending.backend_state == "PENDING" and pending.node is None  # "" and "n/a"
    assert pending.end_time is None and pending.reason == "Resources"
    assert all(job.name == "" for job in jobs.values())  # names come from our records


def test_X9_empty_lean_listing_is_no_jobs() -> None:
    assert states_from_squeue("") == {}


def job(jid: int, state: str) -> SlurmJob:
    return SlurmJob(job_id=jid, name=f"jpu-j{jid}-1", state=state)


def test_X6_end_first_seen_is_kept_until_the_job_runs_again_or_is_gone() -> None:
    seen: dict[int, float] = {}
    note_ends(seen, {1: job(1, "COMPLETED"), 2: job(2, "RUNNING")}, lambda j: True)
    first = seen[1]
    assert set(seen) == {1}
    time.sleep(0.01)
    note_ends(seen, {1: job(1, "COMPLETED"), 2: job(2, "FAILED")}, lambda j: True)
    assert seen[1] == first and 2 in seen  # the first sighting stays
    note_ends(seen, {2: job(2, "FAILED")}, lambda j: j != 1)  # a listing not covering job 1
    assert set(seen) == {1, 2}  # job 1 kept: that listing did not cover it
    note_ends(seen, {2: job(2, "PENDING")}, lambda j: True)  # requeued; 1 gone from Slurm
    assert seen == {}


async def test_X9_one_refresh_serves_concurrent_callers_and_costly_ones_refresh_less() -> None:
    calls = 0

    async def load() -> dict[int, SlurmJob]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)  # a refresh that takes 50 ms
        return {calls: job(calls, "RUNNING")}

    listing = Listing(load, refresh_s=0.01, cost_factor=10.0)
    results = await asyncio.gather(*(listing.get() for _ in range(20)))
    assert calls == 1 and sum(refreshed for _, refreshed in results) == 1
    assert listing.cost_s >= 0.05 and listing.max_age() >= 0.5  # 10 × the cost, not 10 ms
    await asyncio.sleep(0.05)
    assert (await listing.get())[1] is False  # 0.1 s old: still fresh enough by default
    assert (await listing.get(0.0))[1] is True and calls == 2  # a caller that needs it now
    listing.invalidate()
    assert (await listing.get())[1] is True and calls == 3


def test_X9_a_slow_refresh_never_makes_the_listing_stale_for_long() -> None:
    listing = Listing(lambda: asyncio.sleep(0, {}), refresh_s=0.25, cost_factor=10.0)
    listing.cost_s = 3.0  # one squeue that took 3 s on a busy machine
    assert listing.max_age() == 2.0  # capped: job ends are still seen within ~2 s
    listing.cost_s = 0.034  # a typical lean listing of 1,000 jobs
    assert listing.max_age() == 0.34


def test_X9_poll_times_are_aligned_to_a_power_of_two_grid() -> None:
    assert aligned(100.3, 5.0) == 100.0  # step 1 s for the 5 s ceiling
    assert aligned(100.6, 5.0) == 101.0
    assert aligned(100.3, 0.25) == 100.3125  # step 1/16 s for the first poll
    for interval in (0.05, 0.25, 0.84, 1.9, 5.0, 60.0):
        step = 2.0**-10
        while step * 2 <= interval / 4:
            step *= 2
        t = 1234.567
        assert abs(aligned(t, interval) - t) <= step / 2 + 1e-9
        assert (aligned(t, interval) / step).is_integer()


async def test_X9_jobs_at_the_same_backoff_are_polled_in_one_round() -> None:
    watch = WatchList(poll_min_s=0.25, poll_max_s=5.0)
    for i in range(200):  # tracked at different moments, as jobs start
        watch.track(f"j{i}", 1, str(i))
        await asyncio.sleep(0.001)
    for w in watch.jobs.values():
        w.interval = 5.0
        watch.backoff(w)  # each at the ceiling, polled at a slightly different moment
        await asyncio.sleep(0.001)
    assert len({w.due for w in watch.jobs.values()}) <= 2  # one round (two at a grid edge)
    unaligned = WatchList(poll_min_s=0.25, poll_max_s=5.0, align=False)
    for i in range(50):
        unaligned.track(f"j{i}", 1, str(i))
        await asyncio.sleep(0.001)
    assert len({w.due for w in unaligned.jobs.values()}) > 10  # a round per job


NAMED = """\
1501|RUNNING|None|jpu-alice|w01|w01|rtx4090|0|1795950720|1795954320|1795950718|jpu-a-1|
1502|PENDING|Resources|jpu-bob||n/a|rtx4090|0|0|NONE|1795950719|jpu-b-1|
1503|RUNNING|None|mallory|w01|w01|rtx4090|0|1795950720|1795954320|1795950718|other|
1504|RUNNING|None|jpu-bob|w01|w01|rtx4090|0|1795950720|1795954320|1795950718|jpu-b|1|
"""


def test_X9_lookup_by_names_keeps_each_asked_name_and_nothing_else() -> None:
    assert f"{SQUEUE_FORMAT},Name:|" == SQUEUE_NAMED_FORMAT
    found = named_states_from_squeue(NAMED, ["jpu-a-1", "jpu-b-1", "jpu-c-1"])
    assert {n: sorted(j) for n, j in found.items()} == {
        "jpu-a-1": [1501], "jpu-b-1": [1502], "jpu-c-1": [],
    }  # fmt: skip
    assert found["jpu-a-1"][1501].name == "jpu-a-1" and found["jpu-a-1"][1501].node == "w01"
    assert found["jpu-b-1"][1502].state == "PENDING" and found["jpu-b-1"][1502].node is None


async def test_X1_lookups_of_a_burst_share_a_squeue_that_started_after_each_asked() -> None:
    asked: dict[str, float] = {}
    loads: list[tuple[float, list[str]]] = []

    async def load(names: list[str]) -> Named:
        loads.append((time.monotonic(), names))
        await asyncio.sleep(0.01)  # a squeue's wall time
        return {n: {int(n): job(int(n), "RUNNING")} for n in names if int(n) % 2}

    lookup = NameLookup(load, batch=50)

    async def get(name: str) -> dict[int, SlurmJob]:
        asked[name] = time.monotonic()
        return await lookup.get(name)

    names = [str(i) for i in range(120)]
    answers = await asyncio.gather(*(get(n) for n in names))
    assert [sorted(a) for a in answers] == [[int(n)] if int(n) % 2 else [] for n in names]
    assert lookup.loads <= 4, loads  # the first alone, then the others 50 names per squeue
    for name in names:  # each answered by a listing begun after it asked
        started = next(t for t, batch in loads if name in batch)
        assert started >= asked[name]


async def test_X1_a_failed_lookup_fails_every_caller_it_was_to_answer() -> None:
    async def load(names: list[str]) -> Named:
        await asyncio.sleep(0)
        raise RuntimeError("slurmctld down")

    lookup = NameLookup(load)
    results = await asyncio.gather(*(lookup.get(n) for n in "abc"), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results), results


async def test_X6_a_poked_job_is_due_now_and_wakes_the_watch_loop() -> None:
    watch = WatchList(poll_min_s=0.25, poll_max_s=5.0)
    watch.track("j1", 1, "b1")
    watch.track("j2", 1, "b2")
    watch.wake.clear()
    assert watch.due() == []
    watch.poke("b2")
    assert [w.backend_job_id for w in watch.due()] == ["b2"] and watch.wake.is_set()
    watch.poke("gone")  # a job no longer watched: nothing to do

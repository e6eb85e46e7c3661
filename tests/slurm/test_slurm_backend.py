"""What only a real Slurm shows: the sbatch request (X1), placement of multi-GPU jobs (P3),
drained nodes in the inventory, slurmctld outages, the jobcomp fallback (SPEC X1, X6, X9)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from jpu.backends import BackendError
from jpu.backends.slurm.backend import SlurmBackend, SlurmSettings
from jpu.backends.slurm.cli import SlurmCli
from jpu.testing.slurm_env import SlurmEnv, unreachable_conf, wait_end, wait_file
from jpu.testing.stack_process import world_searchable_tmpdir


def squeue_job(env: SlurmEnv, bid: str) -> dict:  # type: ignore[type-arg]
    done = subprocess.run(
        ["squeue", "--json"], env={**os.environ, "SLURM_CONF": env.cluster.conf},
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    (job,) = [j for j in json.loads(done.stdout)["jobs"] if str(j["job_id"]) == bid]
    return job  # type: ignore[no-any-return]


async def test_X1_sbatch_asks_for_partition_node_gres_and_proportional_cpu_memory(
    slurm: SlurmEnv,
) -> None:
    backend = slurm.new_backend()
    spec = slurm.spec(
        'echo "cvd=$CUDA_VISIBLE_DEVICES node=$SLURM_JOB_NODELIST att=$JOB_ATTEMPT"\n'
        "touch ready; sleep 2\n",
        node="gpu-4090x2-02", num_gpus=2, time_limit_s=90.0,
    )  # fmt: skip
    bid = await backend.submit(spec)
    await wait_file(Path(spec.output_dir) / "ready")
    job = squeue_job(slurm, bid)
    assert job["name"] == f"jpu-{spec.job_id}-1" and job["partition"] == "rtx4090"
    assert job["required_nodes"] == "gpu-4090x2-02" and job["nodes"] == "gpu-4090x2-02"
    assert job["tres_per_node"] == "gres:gpu:rtx4090:2"
    assert job["cpus"] == 2 * 8 and job["memory_per_node"] == 2 * 32 * 1024  # X1
    assert job["time_limit"] == 2  # 90 s → whole minutes, rounded up
    assert job["requeue"] is False  # the platform decides retries (X8)
    assert job["user_name"] == "jpu-alice"  # the user's mapped account, never root (X4)
    status = await wait_end(backend, bid)
    assert status.state == "COMPLETED" and status.node == "gpu-4090x2-02"
    # P3: both GPUs of one node; X2 as the job sees it
    assert "cvd=0,1 node=gpu-4090x2-02 att=1" in status.output_tail


async def test_X1_a_start_burst_runs_sbatch_concurrently_and_each_attempt_once(
    slurm: SlurmEnv,
) -> None:
    """Issue 30.5: a burst of starts (every GPU after a drain) keeps several `sbatch` in flight,
    and an attempt submitted by several callers at once still becomes one Slurm job (X1)."""
    backend = slurm.new_backend(submit_concurrency=4)
    run, in_flight, most, squeues = backend.cli.run, [0], [0], [0]

    async def counting(argv: Sequence[str], **kw: Any) -> tuple[int, str, str]:
        sbatch = "sbatch" in argv
        squeues[0] += argv[0] == "squeue"
        in_flight[0] += sbatch
        most[0] = max(most[0], in_flight[0])
        try:
            return await run(argv, **kw)  # the real sbatch: counted, not replaced
        finally:
            in_flight[0] -= sbatch

    backend.cli.run = counting  # type: ignore[method-assign]
    nodes = list(slurm.cluster.nodes)
    specs = [slurm.spec("sleep 3", node=nodes[i % len(nodes)]) for i in range(6)]
    bids = await asyncio.gather(*(backend.submit(s) for s in specs for _ in range(3)))
    per_spec = [set(bids[3 * i : 3 * i + 3]) for i in range(len(specs))]
    assert all(len(b) == 1 for b in per_spec), per_spec  # three callers, one Slurm job
    assert len({b for (b,) in per_spec}) == len(specs)
    assert 1 < most[0] <= 4, most  # concurrent, and bounded by submit_concurrency
    assert squeues[0] < len(specs), squeues  # the burst's lookups by name share a squeue
    names = [squeue_job(slurm, b)["name"] for (b,) in per_spec]
    assert names == [f"jpu-{s.job_id}-1" for s in specs]
    assert not backend._submitting  # no lock outlives its callers
    for (b,) in per_spec:
        assert (await wait_end(backend, b, 60)).state == "COMPLETED"


async def test_X1_O5_a_burst_cut_short_and_submitted_again_makes_each_attempt_one_job(
    slurm: SlurmEnv,
) -> None:
    """O5 in a start burst: the agent dies mid-burst, its submits cut wherever they are (before
    the record, between the record and sbatch, after Slurm accepted a job whose id was never
    saved); its successor (same data dir) and an agent that lost its data dir submit every
    attempt again. Each attempt is one Slurm job, none lost."""
    first = slurm.new_backend(submit_concurrency=3)
    run, accepted, in_slurm = first.cli.run, [0], []

    async def sbatch_outlives_us(argv: Sequence[str], **kw: Any) -> tuple[int, str, str]:
        if "sbatch" not in argv:
            return await run(argv, **kw)
        # a killed agent's sbatch still reaches slurmctld: it runs on, unaffected by the cut
        done = asyncio.ensure_future(run(argv, **kw))
        in_slurm.append(done)
        result = await asyncio.shield(done)
        accepted[0] += 1
        return result

    first.cli.run = sbatch_outlives_us  # type: ignore[method-assign]
    nodes = list(slurm.cluster.nodes)
    specs = [slurm.spec("sleep 30", node=nodes[i % len(nodes)]) for i in range(12)]
    burst = [asyncio.create_task(first.submit(s)) for s in specs]
    while accepted[0] < 3:  # some answered, others still in sbatch or not there yet
        await asyncio.sleep(0.01)
    for task in burst:
        task.cancel()
    await asyncio.gather(*burst, return_exceptions=True)
    await asyncio.gather(*in_slurm, return_exceptions=True)
    assert len(in_slurm) < len(specs)  # the cut left attempts never submitted

    successor = slurm.new_backend(submit_concurrency=3)
    again = await asyncio.gather(*(successor.submit(s) for s in specs))
    amnesiac = slurm.new_backend(data_dir=slurm.data_dir / "lost", submit_concurrency=3)
    assert await asyncio.gather(*(amnesiac.submit(s) for s in specs)) == again
    _, out, _ = await successor.cli.run(["squeue", "--noheader", "--states=all", "--Format=Name:|"])
    names = [line.rstrip("|") for line in out.splitlines()]
    for s in specs:
        assert names.count(f"jpu-{s.job_id}-1") == 1, s.job_id  # exactly once, none lost
    for bid in again:
        await successor.cancel(bid, 0.0)


async def test_X1_a_job_runs_in_its_tiers_partition_on_its_node(slurm: SlurmEnv) -> None:
    backend = slurm.new_backend()
    spec = slurm.spec('echo "p=$SLURM_JOB_PARTITION n=$SLURMD_NODENAME"', node="gpu-3080tix2-01")
    status = await wait_end(backend, await backend.submit(spec))
    assert status.state == "COMPLETED"
    assert "p=rtx3080ti n=gpu-3080tix2-01" in status.output_tail


async def test_X1_a_request_no_node_can_hold_fails_at_submit(slurm: SlurmEnv) -> None:
    backend = slurm.new_backend()
    spec = slurm.spec("true", node="gpu-4090x2-01", num_gpus=3)  # the node has 2
    with pytest.raises(BackendError):
        await backend.submit(spec)
    assert await backend.find(spec.job_id, 1) is None


async def test_inventory_shows_a_drained_nodes_gpus_down(slurm: SlurmEnv) -> None:
    backend = slurm.new_backend()
    node = "gpu-4090x2-02"
    slurm.cluster.scontrol("update", f"nodename={node}", "state=drain", "reason=test maintenance")
    try:
        inventory = {n.node: n for n in await backend.inventory()}
        drained = inventory[node]
        assert drained.state == "drain" and drained.reason == "test maintenance"
        assert drained.gpus == {"rtx4090": 2} and drained.down == {"rtx4090": [0, 1]}
        assert inventory["gpu-3080tix2-01"].gpus == {"rtx3080ti": 2}
        assert all(inventory[n].state == "up" for n in inventory if n != node)
    finally:
        slurm.cluster.scontrol("update", f"nodename={node}", "state=resume")
    deadline = time.monotonic() + 10  # resumed, it answers Slurm's next ping (NOT_RESPONDING)
    while (back := {n.node: n for n in await backend.inventory()}[node]).state != "up":
        assert time.monotonic() < deadline, back
        await asyncio.sleep(0.2)
    assert back.down == {} and back.reason is None


async def test_gpus_in_use_counts_what_slurm_allocated(slurm: SlurmEnv) -> None:
    backend = slurm.new_backend()
    spec = slurm.spec("touch ready; sleep 30", node="gpu-4090x2-02", num_gpus=2)
    bid = await backend.submit(spec)
    await wait_file(Path(spec.output_dir) / "ready")
    assert (await backend.gpus_in_use())["gpu-4090x2-02"] == {"rtx4090": 2}
    await backend.cancel(bid, 0.0)
    assert (await wait_end(backend, bid)).state == "CANCELLED"


async def test_slurmctld_unreachable_is_an_error_not_an_empty_cluster(
    slurm: SlurmEnv, tmp_path: Path
) -> None:
    """squeue/sinfo --json exit 0 with an `errors` list when slurmctld does not answer."""
    wrong = unreachable_conf(slurm, tmp_path)
    cli = SlurmCli(str(wrong))
    with pytest.raises(BackendError):
        await cli.squeue()
    backend = SlurmBackend(SlurmSettings(data_dir=slurm.data_dir, conf=str(wrong)), cli)
    with pytest.raises(BackendError):
        await backend.inventory()


async def test_X6_a_forgotten_job_is_answered_from_the_jobcomp_log(slurm: SlurmEnv) -> None:
    """After MinJobAge slurmctld no longer knows a job; `sacct -c` still does."""
    backend = slurm.new_backend()
    bid = await backend.submit(slurm.spec("exit 7"))
    assert (await wait_end(backend, bid)).exit_code == 7
    job = await backend.cli.sacct_job(int(bid))
    assert job is not None and job.state == "FAILED" and job.exit_status == 7 << 8
    assert job.name.startswith("jpu-")
    fresh = SlurmBackend(  # another agent's data dir: nothing of ours remembers the job
        SlurmSettings(data_dir=slurm.out_root / "other", conf=slurm.cluster.conf)
    )
    fresh.full.at = fresh.lean.at = 1e18  # empty listings that never refresh: as if forgotten
    status = await fresh.poll(bid)
    assert status.state == "FAILED" and status.exit_code == 7


async def test_X5_cancel_of_a_pending_job_ends_it_at_once(slurm: SlurmEnv) -> None:
    backend = slurm.new_backend()
    node = "gpu-4090x2-02"
    slurm.cluster.scontrol("update", f"nodename={node}", "state=drain", "reason=hold jobs")
    try:
        spec = slurm.spec("touch ran", node=node)
        bid = await backend.submit(spec)
        assert (await backend.poll(bid)).state == "PENDING"
        await backend.cancel(bid, 30.0)  # no grace: nothing runs that could checkpoint
        status = await wait_end(backend, bid, 10)
        assert status.state == "CANCELLED" and status.cancelled_by_us
        assert not (Path(spec.output_dir) / "ran").exists()
    finally:
        slurm.cluster.scontrol("update", f"nodename={node}", "state=resume")


async def test_U5_a_job_runs_in_its_chdir_and_one_it_cannot_enter_fails_it(
    slurm: SlurmEnv,
) -> None:
    project = world_searchable_tmpdir("jpu-slurm-chdir-")  # the job's account may enter it
    (project / "hello.txt").write_text("from the project\n")
    (project / "hello.txt").chmod(0o644)
    private = project / "private"
    private.mkdir(mode=0o700)  # root's: the job's account may not
    try:
        backend = slurm.new_backend()
        spec = slurm.spec('cat hello.txt; echo "pwd=$(pwd) wd=$JPU_WORKDIR"', chdir=str(project))
        status = await wait_end(backend, await backend.submit(spec))
        out = Path(spec.output_dir)
        assert status.state == "COMPLETED", (out / "stderr").read_text()
        assert (out / "stdout").read_text() == f"from the project\npwd={project} wd={project}\n"
        # Slurm's WorkDir stays JOB_OUTPUT_DIR: a restarted agent finds the files from it
        assert squeue_job(slurm, await backend.find(spec.job_id, 1) or "")[
            "current_working_directory"
        ] == str(out)
        bad = slurm.spec("echo never", chdir=str(private))
        status = await wait_end(backend, await backend.submit(bad))
        stderr = (Path(bad.output_dir) / "stderr").read_text()
        assert status.state == "FAILED" and f"jpu: cannot run in {private} (chdir)" in stderr
        assert (Path(bad.output_dir) / "stdout").read_text() == ""  # never ran elsewhere
    finally:
        shutil.rmtree(project, ignore_errors=True)

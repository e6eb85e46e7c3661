"""The Slurm backend's LLM backfill (SPEC B1–B3; contract in backfill_contract.py).

Each instance is a batch job in the preemptible partition (`llm`, PriorityTier=1), pinned to the
GPU's node with `--gres=gpu:<tier>:1`, named `jpubf-<backfill_id>` (never `jpu-…`: research
`running()` and its orphan sweep do not see it) and `--no-requeue` (a preempted instance ends;
the backfill service, not Slurm, redeploys after the settle time, B3). Slurm is the record: a
second submit of one backfill id finds the job by name, and `preempt_backfill` works from any
process (the slurm-agent) by reading squeue. The platform GPU index rides in the comment; Slurm
picks the physical GPU itself, which only matters as a count per node and tier.

The batch script picks a free PORT on the node, writes it to `port`, and execs the configured
command (from `job.sh`, X3-like: never on a command line). The endpoint is the `endpoint` of the
command's first output line when it prints one (the stub does), else http://<node>:<PORT>/v1.

B2 (`preempt_backfill`): `scancel` the instances on those GPUs and return once Slurm has released
them (past COMPLETING), SIGKILL to the batch script after the grace. The partition priority would
preempt them too, but later: bench/bench_slurm.py measures both.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from jpu.backends.backfill_contract import BackfillHandle, BackfillSpec
from jpu.backends.base import SAFE_ID, BackendError, BackendStatus, UnknownBackendJob
from jpu.backends.process import DEFAULT_PATH
from jpu.backends.slurm import submit as submit_
from jpu.backends.slurm.cli import SlurmCli
from jpu.backends.slurm.jobs import status_of
from jpu.backends.slurm.listing import Listing
from jpu.backends.slurm.parse import SlurmJob, jobs_from_squeue
from jpu.backends.slurm.settings import SlurmSettings

log = logging.getLogger(__name__)

BF_PREFIX = "jpubf-"
_ENDPOINT_WAIT_S = 5.0  # submit waits this long for the first output line (None if pending)
_PREEMPT_POLL_S = 0.05
_KILL_WAIT_S = 5.0

_SCRIPT = b"""#!/bin/bash
# JPU-Share LLM backfill wrapper (SPEC B1): a free PORT on this node, then the configured command.
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
export PORT
echo "$PORT" > port
exec /bin/bash job.sh
"""


class SlurmBackfill:
    """Mixed into SlurmBackend: the BackfillBackend methods."""

    settings: SlurmSettings
    cli: SlurmCli
    # one submit of a name at a time, a bounded number of all (SlurmBackend._one_submit)
    _one_submit: Callable[[str], AbstractAsyncContextManager[None]]

    async def submit_backfill(self, spec: BackfillSpec) -> BackfillHandle:
        if not SAFE_ID.match(spec.backfill_id):
            raise BackendError(f"bad backfill id {spec.backfill_id!r}")
        name = BF_PREFIX + spec.backfill_id
        out = Path(self.settings.data_dir) / "backfill" / spec.backfill_id
        async with self._one_submit(name):  # idempotent per backfill id (Slurm keeps the name)
            # …for a live instance only: slurmctld lists ended jobs for MinJobAge, and the same
            # id recurs on a new log (ids derive from stream seqs), so an ended one is not ours
            jobs = (await _bf_jobs(self.cli)).values()
            found = [j for j in jobs if j.name == name and not j.terminal]
            if found:
                jid = found[0].job_id
            else:
                jid = await _sbatch(self.cli, self.settings, spec, name, out)
        endpoint = await _endpoint(out, spec.node, lambda: self.poll_backfill(str(jid)))
        log.info(
            "backfill %s is Slurm job %d on %s at %s", spec.backfill_id, jid, spec.node, endpoint
        )
        return BackfillHandle(backend_job_id=str(jid), endpoint=endpoint)

    async def poll_backfill(self, backend_job_id: str) -> BackendStatus:
        if not backend_job_id.isdigit():
            raise UnknownBackendJob(backend_job_id)
        jid = int(backend_job_id)
        job = (await _bf_jobs(self.cli)).get(jid) or await self.cli.sacct_job(jid)
        if job is None or not job.name.startswith(BF_PREFIX):
            raise UnknownBackendJob(backend_job_id)
        return status_of(job, None, None, 0)

    async def cancel_backfill(self, backend_job_id: str, grace_s: float) -> None:
        status = await self.poll_backfill(backend_job_id)  # UnknownBackendJob when not ours
        if not status.terminal:
            await self.cli.scancel(int(backend_job_id))  # SIGTERM, SIGKILL after KillWait

    async def running_backfill(self) -> list[str]:
        jobs = await _bf_jobs(self.cli)
        return [str(j) for j, job in sorted(jobs.items()) if not job.terminal]

    async def preempt_backfill(
        self, node: str, tier: str, gpus: list[int], grace_s: float
    ) -> list[str]:
        """B2 from any process: squeue says which instances hold these GPUs."""
        victims = [
            jid
            for jid, job in (await self._backfill_now()).items()
            if not job.terminal and job.node == node and _on(job, tier, gpus)
        ]
        if not victims:
            return []
        ids = [str(j) for j in victims]
        await self.cli.run(["scancel", *ids], check=False)
        deadline, killed = time.monotonic() + grace_s, False
        while True:
            jobs = await self._backfill_now()
            alive = [j for j in victims if j in jobs and not jobs[j].terminal]
            if not alive:
                break
            if time.monotonic() >= deadline:
                if killed:
                    log.error("backfill %s on %s/%s%s survived SIGKILL", alive, node, tier, gpus)
                    break
                await self.cli.run(
                    ["scancel", "--batch", "--signal=KILL", *map(str, alive)], check=False
                )
                deadline, killed = time.monotonic() + _KILL_WAIT_S, True
            await asyncio.sleep(_PREEMPT_POLL_S)
        log.info("preempted backfill %s on %s/%s%s", ids, node, tier, gpus)
        return ids

    async def _backfill_now(self) -> dict[int, SlurmJob]:
        """Every backfill job, from a `squeue` that started after the call (B2 never acts on a
        stale listing), one for all concurrent callers: a start burst preempts before each
        start, and a `squeue --json` per start cost more than its sbatch."""
        jobs, _ = await self._backfill_listing.get(0.0)
        return jobs

    @functools.cached_property
    def _backfill_listing(self) -> Listing:
        return Listing(lambda: _bf_jobs(self.cli), 0.0, 0.0)


async def _bf_jobs(cli: SlurmCli) -> dict[int, SlurmJob]:
    """Every backfill job slurmctld holds (a fresh squeue: preemption must not act on stale)."""
    return jobs_from_squeue(await cli.squeue(), BF_PREFIX)


def _on(job: SlurmJob, tier: str, gpus: list[int]) -> bool:
    fields = dict(w.split("=", 1) for w in job.comment.split() if "=" in w)
    return (
        fields.get("tier") == tier
        and fields.get("gpu", "").isdigit()
        and int(fields["gpu"]) in gpus
    )


def _env(spec: BackfillSpec, out: Path) -> dict[str, str]:
    bindir = os.path.dirname(sys.executable)  # `python -m …` resolves to our interpreter
    return {
        "PATH": f"{bindir}:{DEFAULT_PATH}",
        "HOME": str(out),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        **{k: v for k, v in spec.env.items() if k and "=" not in k and "\0" not in k + v},
        "JPU_BACKFILL_ID": spec.backfill_id,
    }


async def _sbatch(
    cli: SlurmCli, settings: SlurmSettings, spec: BackfillSpec, name: str, out: Path
) -> int:
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    (out / "job.sh").write_text(spec.command + "\n")
    for f in ("stdout", "stderr", "port"):
        (out / f).unlink(missing_ok=True)
    argv = [
        "sbatch", "--parsable", f"--job-name={name}",
        f"--partition={spec.partition or settings.backfill_partition}", f"--nodelist={spec.node}",
        "--nodes=1", "--ntasks=1", f"--gres=gpu:{spec.tier}:1",
        f"--cpus-per-task={settings.backfill_cpus}", f"--mem={settings.backfill_mem_gb}G",
        "--no-requeue",  # a preempted instance ends; the service redeploys (B3)
        f"--chdir={out}", f"--output={out}/stdout", f"--error={out}/stderr",
        f"--comment=jpu backfill tier={spec.tier} gpu={spec.gpu}",
    ]  # fmt: skip
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, submit_.export_file(_env(spec, out)))
        os.close(write_fd)
        write_fd = -1
        argv += ["--export=NIL", f"--export-file={read_fd}"]
        _, text, _ = await cli.run(argv, stdin=_SCRIPT, pass_fds=[read_fd])
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    try:
        return int(text.strip().split(";")[0])
    except ValueError as e:
        raise BackendError(f"sbatch printed no job id: {text!r}") from e


async def _endpoint(
    out: Path, node: str, poll: Callable[[], Awaitable[BackendStatus]]
) -> str | None:
    """The command's own word (first output line, JSON with `endpoint`), else node:PORT.
    None when the job is not running soon (its GPU is busy outside the platform's view)."""
    deadline, checked = time.monotonic() + _ENDPOINT_WAIT_S, time.monotonic()
    while time.monotonic() < deadline:
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            if (await poll()).state != "RUNNING":
                return None
        try:
            first = (out / "stdout").read_text().split("\n", 1)
        except OSError:
            first = []
        if len(first) == 2:  # a complete first line
            try:
                doc = json.loads(first[0])
            except ValueError:
                doc = None
            if isinstance(doc, dict) and isinstance(doc.get("endpoint"), str):
                return doc["endpoint"]
            return _from_port(out, node)
        await asyncio.sleep(0.05)
    log.warning("backfill in %s printed nothing within %.0fs", out, _ENDPOINT_WAIT_S)
    return _from_port(out, node)


def _from_port(out: Path, node: str) -> str | None:
    try:
        port = (out / "port").read_text().strip()
    except OSError:
        return None
    return f"http://{node}:{port}/v1" if port.isdigit() else None

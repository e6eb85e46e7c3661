"""The real Slurm backend (SPEC X9): attempts are Slurm batch jobs, driven through the CLI.

  submit    sbatch (submit.py: X1–X3), as the user's mapped Unix account (its UID when the
            agent is root, like the local backend's setpriv); idempotent per attempt by job name
            (concurrent lookups share one `squeue --name=a,b,…`: listing.NameLookup).
  poll      one shared lean `squeue` listing of the jobs we have records of (listing.py:
            refreshed at most every `refresh_s`, longer when a refresh is costly), then the
            jobcomp log (`sacct -c`) for jobs slurmctld has forgotten; states mapped (parse).
            Name lookups and adoption read the full `squeue --json`.
  cancel    X5: SIGTERM at once, SIGKILL after the grace, kill_failed + drain after
            `kill_failed_after_s` (escalate.py, which also enforces sub-minute limits).
  inventory `sinfo --json`: nodes × GPU types; drained/down nodes' GPUs are down.
  running   our attempts (records under data_dir, or adopted by name through `find`) that Slurm
            still runs: re-adoption after an agent restart. Other jpu-* jobs on the cluster
            (another deployment, LLM backfill) are never ours to cancel.
  backfill  LLM instances in the `llm` partition (backfill_jobs.py, SPEC B1–B3).

Times and files of one attempt: jobs.py. Jobs are read through pyslurm instead of squeue
where it matches the cluster's Slurm (pyslurm_api.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec

from jpu.backends import isolation as iso_
from jpu.backends.accounts import Account, current_account
from jpu.backends.base import (
    SAFE_ID,
    BackendError,
    BackendStatus,
    LaunchSpec,
    NodeInventory,
    UnknownBackendJob,
)
from jpu.backends.slurm import jobs as jobs_
from jpu.backends.slurm import submit as submit_
from jpu.backends.slurm.backfill_jobs import SlurmBackfill
from jpu.backends.slurm.cli import SlurmCli
from jpu.backends.slurm.escalate import Escalator
from jpu.backends.slurm.listing import Listing, NameLookup, note_ends
from jpu.backends.slurm.parse import (
    SlurmJob,
    inventory_from_sinfo,
    jobs_from_squeue,
    used_gpus,
)
from jpu.backends.slurm.pyslurm_api import cluster_version, load_jobs, pyslurm_usable
from jpu.backends.slurm.records import SlurmRecord, SlurmRecordStore
from jpu.backends.slurm.settings import SlurmSettings
from jpu.backends.workspaces import Workspaces

log = logging.getLogger(__name__)


class SlurmBackend(SlurmBackfill):
    name = "slurm"

    def __init__(self, settings: SlurmSettings, cli: SlurmCli | None = None) -> None:
        self.settings = settings
        self.cli = cli or SlurmCli(settings.conf)
        self.store = SlurmRecordStore(Path(settings.data_dir) / "slurm-backend")
        self.accounts = settings.account_map()
        self._agent = current_account()
        self._isolation: dict[str, iso_.Isolation] = {}  # by account
        self._wanted = iso_.wants(
            settings.isolation, settings.apptainer, settings.container_runtime
        )
        if settings.apptainer is not None and self._wanted == "apptainer":
            iso_.check_apptainer(settings.apptainer)  # X4: unusable is an error at start
        if self._wanted == "podman":  # X4a: checked where the agent runs (the nodes: docs)
            iso_.check_podman(settings.podman)
        # X4a: the agent's workspace-builder role; its images go to the podman store the nodes'
        # helper runs them from (on one machine, or a shared `container_storage`: docs)
        self.builds_workspaces = self._wanted == "podman"
        self.workspaces = Workspaces(Path(settings.data_dir) / "workspaces", settings.podman,
                                     settings.pip)  # fmt: skip
        self._records: dict[str, SlurmRecord] = {}  # by Slurm job name
        self._by_id: dict[int, str] = {}
        self._loaded = False
        factor = settings.refresh_cost_factor
        self.full = Listing(self._load_jobs, settings.refresh_s, factor)  # our names: --json
        self.lean = Listing(self._load_states, settings.refresh_s, factor)  # recorded ids only
        self.names = NameLookup(self.cli.squeue_named)  # is an attempt in Slurm already?
        self._submitting: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # name → lock, callers
        self._submit_slots = asyncio.Semaphore(max(1, settings.submit_concurrency))
        self._seen_end: dict[int, float] = {}  # Slurm id → wall clock when seen terminal
        self._reader: str | None = None  # "pyslurm" | "squeue", chosen on first use
        self.escalator = Escalator(self)

    # --- ExecutionBackend -------------------------------------------------------------------

    async def submit(self, spec: LaunchSpec) -> str:
        _validate(spec)
        name = submit_.job_name(spec.job_id, spec.attempt)
        async with self._one_submit(name):  # two submits of one attempt must not both sbatch
            self._load()
            existing = await self._find(name)  # one squeue for the lookups of a whole burst
            if existing is not None:
                return str(existing)  # idempotent per (job_id, attempt)
            account = self.accounts.account_for(spec.user)
            isolation = self._in_workspace(spec, await self._isolation_for(account))
            record = SlurmRecord(
                name=name, job_id=spec.job_id, attempt=spec.attempt, user=spec.user,
                account=account.name, node=spec.node, output_dir=spec.output_dir,
                isolation=isolation.name, time_limit_s=spec.time_limit_s,
                submitted_at=time.time(),
            )  # fmt: skip
            try:  # the record before sbatch (a crash in between is found by name); file
                # writes and fsyncs off the event loop, so a burst's overlap each other and sbatch
                await asyncio.to_thread(self._prepare, spec, account, record)
            except OSError as e:
                raise BackendError(f"cannot prepare {name}: {e}") from e
            try:
                async with self._submit_slots:  # at most submit_concurrency sbatch in flight
                    record.slurm_id = await self._sbatch(spec, account, isolation, record)
            except BackendError:
                self.store.forget(name)
                raise
            self.full.invalidate()  # the next look must see the new job
            self.lean.invalidate()
            await asyncio.to_thread(self.store.save, record)
            self._remember(record)
        log.info("submitted %s as Slurm job %d (%s)", name, record.slurm_id, account.name)
        if submit_.enforced_by_backend(spec.time_limit_s):
            self.escalator.kick()
        return str(record.slurm_id)

    @contextlib.asynccontextmanager
    async def _one_submit(self, name: str) -> AsyncIterator[None]:
        """One submit of `name` at a time (its lookup and its sbatch). A name's lock lives
        while any caller holds or awaits it: dropped earlier, a third caller could take a new
        lock while the second still waits on the old one."""
        lock, callers = self._submitting.setdefault(name, (asyncio.Lock(), [0]))
        callers[0] += 1
        try:
            async with lock:
                yield
        finally:
            callers[0] -= 1
            if callers[0] == 0:
                del self._submitting[name]  # from now on the record (or Slurm) answers

    def _prepare(self, spec: LaunchSpec, account: Account, record: SlurmRecord) -> None:
        jobs_.prepare_output(spec, account)
        self.store.save(record)

    async def find(self, job_id: str, attempt: int) -> str | None:
        self._load()
        found = await self._find(submit_.job_name(job_id, attempt))
        return None if found is None else str(found)

    async def poll(self, backend_job_id: str) -> BackendStatus:
        jid = _parse_id(backend_job_id)
        self._load()
        record = self._record_of(jid)
        if record is not None and record.final is not None:
            return record.final
        job = (await self.snapshot(full=record is None)).get(jid)  # not ours by record: names
        if job is None and record is not None:
            job = (await self.snapshot(0.0)).get(jid)  # the snapshot may predate the sbatch
        if job is None:
            job = await self.cli.sacct_job(jid)  # older than MinJobAge: the jobcomp log
        if job is None and record is not None:  # ours, but Slurm lost it (state wiped?)
            status = BackendStatus(
                state="NODE_FAIL", node=record.node, isolation=record.isolation,
                reason=f"Slurm no longer knows job {jid}",
            )  # fmt: skip
        elif job is None or (record is None and not job.name.startswith(submit_.NAME_PREFIX)):
            raise UnknownBackendJob(backend_job_id)
        else:
            seen = self._seen_end.get(jid)
            status = jobs_.status_of(job, record, seen, self.settings.tail_bytes)
        if status.terminal and record is not None:
            record.final = status  # kept: slurmctld forgets the job after MinJobAge
            self.store.save(record)
            self._seen_end.pop(jid, None)
        return status

    async def cancel(self, backend_job_id: str, grace_s: float) -> None:
        jid = _parse_id(backend_job_id)
        self._load()
        record = self._record_of(jid)
        job = (await self.snapshot(0.0, full=record is None)).get(jid)
        record = record or (self._adopt(job) if job is not None else None)
        if record is None:
            if job is None and await self.cli.sacct_job(jid) is None:
                raise UnknownBackendJob(backend_job_id)
            return  # not one of ours, or long over
        if record.final is not None or job is None or job.terminal:
            return
        await self.escalator.request(record, "cancel", grace_s, pending=job.state == "PENDING")

    async def inventory(self) -> list[NodeInventory]:
        return inventory_from_sinfo(await self.cli.sinfo())

    async def gpus_in_use(self) -> dict[str, dict[str, int]]:
        """node → tier → GPUs Slurm has allocated (any partition, LLM backfill included)."""
        return used_gpus((await self.cli.sinfo()).get("nodes", []))

    async def running(self) -> list[str]:
        """Our attempts (in our records, or adopted by `find`) that Slurm has not ended."""
        self._load()
        out = []
        for jid, job in (await self.snapshot(full=True)).items():
            record = self._record_of(jid) or self._claim(job)
            if record is not None and record.final is None and not job.terminal:
                out.append(jid)
        return [str(j) for j in sorted(out)]

    async def close(self) -> None:
        """Stop watching; the jobs keep running (they are the cluster's) and a new backend
        re-adopts them and continues any escalation from the records."""
        await self.escalator.stop()

    # --- shared with the escalator ----------------------------------------------------------

    async def snapshot(
        self, max_age_s: float | None = None, *, full: bool = False
    ) -> dict[int, SlurmJob]:
        """Our jobs as slurmctld sees them; one squeue serves every concurrent caller. Default:
        the jobs we have records of, from the lean listing; `full`: every job named as ours,
        with name, comment and paths (finding and adopting by name)."""
        full = full or self.settings.listing == "json"
        jobs, refreshed = await (self.full if full else self.lean).get(max_age_s)
        if refreshed:
            note_ends(self._seen_end, jobs, lambda j: full or j in self._by_id)
        return jobs

    def active_records(self) -> list[SlurmRecord]:
        self._load()
        return [r for r in self._records.values() if r.slurm_id is not None and r.final is None]

    def save(self, record: SlurmRecord) -> None:
        self.store.save(record)

    # --- internals --------------------------------------------------------------------------

    async def _read_through(self) -> str:
        """X9: "pyslurm" where it matches the cluster's Slurm, else "squeue"; chosen once."""
        if self._reader is None:
            self._reader = "squeue"
            if self.settings.pyslurm != "off":
                usable, why = pyslurm_usable(await cluster_version(self.cli))
                self._reader = "pyslurm" if usable else "squeue"
                log.info("Slurm jobs are read through %s (%s)", self._reader, why)
        return self._reader

    async def _load_jobs(self) -> dict[int, SlurmJob]:
        if await self._read_through() == "pyslurm":
            return await load_jobs(submit_.NAME_PREFIX)
        return jobs_from_squeue(await self.cli.squeue(), submit_.NAME_PREFIX)

    async def _load_states(self) -> dict[int, SlurmJob]:
        """The lean listing, for the jobs of our records (their name, comment and output dir
        are the record's: the listing carries no text a job could write). Through pyslurm
        where it works (no process per listing), else the lean `squeue --Format`."""
        if await self._read_through() == "pyslurm":
            listed = await load_jobs(submit_.NAME_PREFIX)
        else:
            listed = await self.cli.squeue_states()
        out = {}
        for jid, job in listed.items():
            record = self._record_of(jid)
            if record is not None:
                out[jid] = msgspec.structs.replace(
                    job, name=record.name, workdir=record.output_dir,
                    comment=jobs_.comment_for(record.isolation, record.time_limit_s),
                )  # fmt: skip
        return out

    def _load(self) -> None:
        """Once: our records of earlier runs, and resume any escalation they were in (X5)."""
        if self._loaded:
            return
        self._loaded = True
        for record in self.store.all():
            self._remember(record)
        if any(
            r.intent or submit_.enforced_by_backend(r.time_limit_s) for r in self.active_records()
        ):
            self.escalator.kick()

    def _remember(self, record: SlurmRecord) -> None:
        self._records[record.name] = record
        if record.slurm_id is not None:
            self._by_id[record.slurm_id] = record.name

    def _record_of(self, jid: int) -> SlurmRecord | None:
        name = self._by_id.get(jid)
        return self._records.get(name) if name else None

    async def _find(self, name: str) -> int | None:
        record = self._records.get(name)
        if record is not None and record.slurm_id is not None:
            return record.slurm_id
        lean = self.settings.listing != "json" and "," not in name  # --name takes a list
        # lean: only the jobs of exactly this name, and the full listing only to adopt one
        named = await (self.names.get(name) if lean else self.snapshot(0.0, full=True))
        for jid, job in named.items():
            if (lean or job.name == name) and not jobs_.never_ran(job):
                if record is not None:  # submitted by an agent that died before recording it
                    record.slurm_id = jid
                    self.store.save(record)
                    self._remember(record)
                    return jid
                found = (await self.snapshot(0.0, full=True)).get(jid) if lean else job
                if found is not None and found.name == name:
                    self._adopt(found)
                    return jid
        return None

    def _claim(self, job: SlurmJob) -> SlurmRecord | None:
        """Our record written before an sbatch whose answer the agent did not live to save."""
        record = self._records.get(job.name)
        if record is None or record.slurm_id is not None or jobs_.never_ran(job):
            return None
        record.slurm_id = job.job_id
        self.store.save(record)
        self._remember(record)
        return record

    def _adopt(self, job: SlurmJob) -> SlurmRecord | None:
        record = jobs_.adopt(job)
        if record is not None:
            self.store.save(record)
            self._remember(record)
            log.info("adopted Slurm job %d (%s)", job.job_id, job.name)
        return record

    async def _isolation_for(self, account: Account) -> iso_.Isolation:
        """X4: Apptainer when configured (checked at start); else a network namespace when the
        account may create one (an unprivileged user namespace keeps the job's own UID), else
        none — and the job's record says which."""
        if self._wanted == "apptainer" and self.settings.apptainer is not None:
            return iso_.container(self.settings.apptainer)
        if self._wanted == "podman":
            return iso_.podman(self.settings.podman)
        if self._wanted == "none":
            return iso_.NONE
        if account.name not in self._isolation:
            prefix = ["unshare", "--user", "--map-current-user", "--net", "--"]
            rc, _, _ = await self.cli.run([*prefix, "true"], check=False, account=self._as(account))
            self._isolation[account.name] = iso_.netns(prefix if rc == 0 else [])
        return self._isolation[account.name]

    def _in_workspace(self, spec: LaunchSpec, isolation: iso_.Isolation) -> iso_.Isolation:
        """X4a: a job naming a workspace runs in the image resolved at submit, only in podman
        (the node's helper refuses any image that is not the base or a workspace's)."""
        if spec.workspace is None:
            return isolation
        if isolation.podman is None:
            raise BackendError("workspace: needs isolation: container (podman)")
        image = spec.workspace_image or self.workspaces.require_ready(spec.user, spec.workspace)
        return iso_.podman(dataclasses.replace(isolation.podman, image=image))

    def _as(self, account: Account) -> Account | None:
        """Run a command as the job's account (root agent) or as ourselves (None)."""
        if self._agent.is_root and account.uid != self._agent.uid:
            return account
        return None

    async def _sbatch(
        self, spec: LaunchSpec, account: Account, isolation: iso_.Isolation, record: SlurmRecord
    ) -> int:
        env = submit_.export_file(submit_.job_env(spec, account.name, isolation))
        comment = jobs_.comment_for(record.isolation, spec.time_limit_s)
        read_fd, write_fd = os.pipe()
        try:
            os.write(write_fd, env)  # small (the user's env): fits the pipe buffer
            os.close(write_fd)
            write_fd = -1
            argv = submit_.sbatch_argv(spec, read_fd, comment)
            _, out, _ = await self.cli.run(
                argv,
                stdin=submit_.wrapper(isolation),
                pass_fds=[read_fd],
                account=self._as(account),
            )
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)
        try:
            return int(out.strip().split(";")[0])
        except ValueError as e:
            raise BackendError(f"sbatch printed no job id: {out!r}") from e


def _validate(spec: LaunchSpec) -> None:
    if not SAFE_ID.match(spec.job_id) or spec.attempt < 1:
        raise BackendError(f"bad job id or attempt: {spec.job_id!r} {spec.attempt}")
    if not spec.node or not spec.tier or spec.num_gpus < 1:
        raise BackendError(f"bad placement: {spec.node!r} {spec.tier!r} × {spec.num_gpus}")
    if not spec.output_dir:
        raise BackendError("output_dir is required")
    if spec.chdir is not None and not spec.chdir.startswith("/"):
        raise BackendError(f"chdir must be an absolute path: {spec.chdir!r}")  # U5


def _parse_id(backend_job_id: str) -> int:
    if not backend_job_id.isdigit():
        raise UnknownBackendJob(backend_job_id)
    return int(backend_job_id)

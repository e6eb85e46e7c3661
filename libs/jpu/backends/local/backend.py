"""The local backend (SPEC X9): each attempt is a local process on a configured fake GPU inventory.

Under `isolation: container` (podman, SPEC X4a) each attempt's process is the launch wrapper
around `podman run`; its container is named after the attempt and labelled with this record
store, ended by name when the attempt ends (a SIGKILL reaches only the podman client), and a
restarted backend removes those of its containers no unfinished attempt owns (containers.py).

Jobs run in their own session, so they survive an agent restart (like Slurm jobs survive a
slurm-agent restart): the backend persists one record per attempt (records.py) and a restarted
backend re-adopts the live pids (pid + start time, so a recycled pid is never mistaken for a
job) and reads the exit status the launch wrapper wrote (process.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import msgspec

from jpu.backends import containers, seccomp, supervise
from jpu.backends import isolation as iso_
from jpu.backends import process as proc_
from jpu.backends.accounts import Account, current_account
from jpu.backends.base import (
    SAFE_ID,
    BackendError,
    BackendStatus,
    LaunchSpec,
    NodeInventory,
    UnknownBackendJob,
)
from jpu.backends.local.backfill_processes import LocalBackfill
from jpu.backends.local.records import JobRecord, RecordStore
from jpu.backends.local.settings import LocalSettings
from jpu.backends.local.watch import ProcessWatcher, adopt_unsaved_spawn
from jpu.backends.outputs import create_private, open_output_dir
from jpu.backends.workspaces import Workspaces, venv_env
from jpu.policy.workdir import outside_roots_problem

log = logging.getLogger(__name__)


class LocalBackend(LocalBackfill):
    name = "local"

    def __init__(self, settings: LocalSettings) -> None:
        self.settings = settings
        self.store = RecordStore(Path(settings.data_dir) / "local-backend")
        self.accounts = settings.account_map()
        self._agent = current_account()
        self._owner = str(self.store.root.resolve())  # the label of our containers
        self._isolation: iso_.Isolation | None = None
        wanted = iso_.wants(settings.isolation, settings.apptainer, settings.container_runtime)
        if wanted == "apptainer":
            assert settings.apptainer is not None
            iso_.check_apptainer(settings.apptainer)  # X4: unusable is an error at start
            self._isolation = iso_.container(settings.apptainer)
        if wanted == "podman":
            iso_.check_podman(settings.podman)  # X4a: no runtime, no start (never a fallback)
            profile = seccomp.write_profile(self.store.root / "seccomp.json")  # SEC6
            pod = dataclasses.replace(settings.podman, seccomp=str(profile))
            self._isolation = iso_.podman(pod)
        self.builds_workspaces = wanted == "podman"  # X4a: the agent's workspace-builder role
        # X4a: workspaces of this data dir (<data_dir>/workspaces), built with podman
        self.workspaces = Workspaces(Path(settings.data_dir) / "workspaces", settings.podman,
                                     settings.pip)  # fmt: skip
        self._watchers: dict[str, ProcessWatcher] = {}
        self._on_end: Callable[[str], None] | None = None
        self._records: dict[str, JobRecord] = {}
        self._loaded = False
        # per attempt: submits of different attempts proceed concurrently (the fsyncs overlap)
        self._submit_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    # --- ExecutionBackend -------------------------------------------------------------------

    async def submit(self, spec: LaunchSpec) -> str:
        bid = _backend_id(spec.job_id, spec.attempt)
        async with self._submit_locks[bid]:  # two submits of one attempt must not both spawn
            self._load()
            self._validate(spec)
            if bid in self._records:
                return bid  # idempotent per (job_id, attempt)
            spec = await asyncio.to_thread(self._checked_workdir, spec)  # SEC1, as the account
            try:
                # O5: saved (fsynced) before the spawn, in the same thread hop as the files
                record, fds = await asyncio.to_thread(self._prepare_saved, spec, bid)
            except OSError as e:
                raise BackendError(f"cannot prepare {bid}: {e}") from e
            started_at = time.time()
            try:
                process = await self._spawn(record, spec, fds)
            except BackendError:
                self.store.forget(bid)
                raise
            finally:
                for fd in fds:
                    os.close(fd)
            record.pid, record.started_at = process.pid, started_at
            record.ticks = proc_.start_ticks(process.pid) or 0
            await asyncio.to_thread(self.store.save, record)
            self._watch(record, process)
        log.info("started %s pid=%d as %s", bid, process.pid, record.account)
        return bid

    def notify_ends(self, callback: Callable[[str], None]) -> None:
        """NotifiesEnds: the watcher of each attempt calls back once its end is saved."""
        self._on_end = callback

    async def find(self, job_id: str, attempt: int) -> str | None:
        self._load()
        bid = _backend_id(job_id, attempt)
        return bid if bid in self._records else None

    async def poll(self, backend_job_id: str) -> BackendStatus:
        record = self._get(backend_job_id)
        if record.final is not None:
            return record.final
        return BackendStatus(
            state="RUNNING" if record.pid else "PENDING",
            started_at=record.started_at or None,
            node=record.node,
            isolation=record.isolation,
        )

    async def cancel(self, backend_job_id: str, grace_s: float) -> None:
        record = self._get(backend_job_id)
        watcher = self._watchers.get(backend_job_id)
        if record.final is None and watcher is not None:
            watcher.request("cancel", grace_s)

    async def inventory(self) -> list[NodeInventory]:
        drained = self._drained()
        return [
            NodeInventory(
                node=n.name,
                gpus=dict(n.gpus),
                state="drain" if n.name in drained else "up",
                reason=drained.get(n.name),
            )
            for n in self.settings.nodes
        ]

    async def running(self) -> list[str]:
        self._load()
        return sorted(bid for bid, r in self._records.items() if r.final is None)

    async def close(self) -> None:
        """Stop watching; the jobs keep running and a new backend re-adopts them."""
        for w in self._watchers.values():
            await w.stop()
        self._watchers.clear()
        await self.close_backfill()

    # --- internals --------------------------------------------------------------------------

    def _get(self, backend_job_id: str) -> JobRecord:
        self._load()
        record = self._records.get(backend_job_id)
        if record is None:
            raise UnknownBackendJob(backend_job_id)
        return record

    def _load(self) -> None:
        """Once: re-adopt every attempt a previous agent left unfinished."""
        if self._loaded:
            return
        self._loaded = True
        for record in self.store.all():
            unspawned = record.final is None and record.pid == 0
            if unspawned and adopt_unsaved_spawn(record, self.store) == "never spawned":
                # the agent died between the save and the spawn: not found, so the agent's
                # submit launches it now instead of a "never started" failure
                log.warning("%s: never spawned by a previous agent", record.backend_job_id)
                self.store.forget(record.backend_job_id)
                continue
            self._records[record.backend_job_id] = record
            if record.final is None:
                self._watch(record, None)
        self._end_stray_containers()

    def _end_stray_containers(self) -> None:
        """O5: a container of ours that no unfinished attempt owns (its attempt ended while no
        agent watched, or its record is gone) is ended; the others are adopted with their
        wrapper (the watcher ends them with their attempt)."""
        isolation = self._isolation
        if isolation is None or isolation.podman is None:
            return
        base = iso_.podman_base(isolation.podman)
        names = containers.owned(base, self._owner) or []
        keep = {r.container for r in self._records.values() if r.final is None}
        for name in set(names) - keep:
            log.warning("ending container %s: no unfinished attempt owns it", name)
            containers.remove(base, name)

    def _validate(self, spec: LaunchSpec) -> None:
        if not SAFE_ID.match(spec.job_id) or spec.attempt < 1:
            raise BackendError(f"bad job id or attempt: {spec.job_id!r} {spec.attempt}")
        node = next((n for n in self.settings.nodes if n.name == spec.node), None)
        if node is None or spec.tier not in node.gpus:
            raise BackendError(f"node {spec.node!r} has no tier {spec.tier!r}")
        if len(spec.gpus) != spec.num_gpus or any(
            not 0 <= g < node.gpus[spec.tier] for g in spec.gpus
        ):
            raise BackendError(f"GPU indices {spec.gpus} do not fit {spec.node}/{spec.tier}")
        if not spec.output_dir:
            raise BackendError("output_dir is required")
        if spec.chdir is not None and not spec.chdir.startswith("/"):
            raise BackendError(f"chdir must be an absolute path: {spec.chdir!r}")  # U5
        if spec.workspace is not None:  # X4a: only READY, and only in a container
            if self._isolation_for().podman is None:
                raise BackendError("workspace: needs isolation: container (podman)")
            self._workspace_image(spec)

    def _checked_workdir(self, spec: LaunchSpec) -> LaunchSpec:
        """SPEC SEC1 at launch, not trusting submit time: the `chdir` resolved as the job's
        account (a symlink swapped in since is followed) must still lie under the roots and
        outside the data directory; the job then runs in (and podman mounts) the resolved
        path. A refusal is a BackendError: the attempt ends with it as its reason."""
        if spec.chdir is None:
            return spec
        account = self.accounts.account_for(spec.user)
        real = proc_.resolve_as(account, self._agent, spec.chdir)
        if real is None:
            if self._isolation_for().podman is not None:  # podman (root) would mount it anyway
                raise BackendError(
                    f"chdir: {spec.chdir}: the job's account {account.name} cannot enter it "
                    "(or it does not exist)"
                )
            return spec  # entered as the account on the host: the job fails there (U5)
        data_dir = os.path.realpath(self.settings.data_dir)
        problem = outside_roots_problem("chdir", real, self.settings.workdir_roots, data_dir)
        if problem is not None:
            raise BackendError(problem)
        return msgspec.structs.replace(spec, chdir=real)

    def _workspace_image(self, spec: LaunchSpec) -> str:
        """X4a: the image resolved at submit (it must still exist: a deleted workspace's image
        is gone), else the READY build of this name."""
        assert spec.workspace is not None
        if spec.workspace_image is None:
            return self.workspaces.require_ready(spec.user, spec.workspace)
        if not self.workspaces.image_exists(spec.workspace_image):
            raise BackendError(f"workspace: the image of {spec.workspace!r} is gone (deleted?)")
        return spec.workspace_image

    def _isolation_for(self) -> iso_.Isolation:
        """X4: Apptainer (decided at start), else a netns when the kernel allows, else none."""
        if self._isolation is None:
            wanted = iso_.wants(self.settings.isolation, self.settings.apptainer)
            prefix = proc_.netns_prefix(self._agent) if wanted == "netns" else []
            self._isolation = iso_.netns(prefix)
        return self._isolation

    def _prepare_saved(self, spec: LaunchSpec, bid: str) -> tuple[JobRecord, tuple[int, int]]:
        """`_prepare`, then the record saved before the spawn: a crash in between reads as
        never spawned (adopt_unsaved_spawn), never as a second run (SPEC O5)."""
        record, fds = self._prepare(spec, bid)
        try:
            self.store.save(record)
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return record, fds

    def _prepare(self, spec: LaunchSpec, bid: str) -> tuple[JobRecord, tuple[int, int]]:
        """Account, output directory (0700, the user's), script and output files (X2, X3).
        Returns the record and the open stdout/stderr fds the job inherits."""
        account = self.accounts.account_for(spec.user)
        out = Path(spec.output_dir)
        env = proc_.env_records(self._job_env(spec, account))
        dir_fd = open_output_dir(out, account, levels=2)
        try:
            os.close(create_private(dir_fd, "job.sh", account, spec.command.encode()))
            os.close(create_private(dir_fd, proc_.ENV_FILE, account, env))
            stdout = create_private(dir_fd, "stdout", account)
            stderr = create_private(dir_fd, "stderr", account)
        finally:
            os.close(dir_fd)
        proc_.clear_status(self.store.status_file(bid))
        record = JobRecord(
            backend_job_id=bid,
            job_id=spec.job_id,
            attempt=spec.attempt,
            user=spec.user,
            account=account.name,
            node=spec.node,
            tier=spec.tier,
            gpus=list(spec.gpus),
            output_dir=str(out),
            isolation=self._isolation_for().name,
            time_limit_s=spec.time_limit_s,
        )
        podman = self._isolation_for().podman
        if podman is not None:
            record.container = iso_.container_name(bid)
            record.podman = iso_.podman_base(podman)
        return record, (stdout, stderr)

    async def _spawn(
        self, record: JobRecord, spec: LaunchSpec, fds: tuple[int, int]
    ) -> asyncio.subprocess.Process:
        account = self.accounts.account_for(spec.user)
        out = Path(record.output_dir)
        isolation = self._isolation_for()
        if spec.workspace is not None and isolation.podman is not None:  # X4a: its image
            image = self._workspace_image(spec)
            isolation = iso_.podman(dataclasses.replace(isolation.podman, image=image))
        argv = proc_.launch_argv(
            self.store.status_file(record.backend_job_id),
            out,
            account,
            self._agent,
            isolation,
            spec.workdir,  # U5: entered as the user, after the drop (process.LOADER)
            container=record.container,
            stop_timeout_s=self.settings.timeout_grace_s,
            labels={containers.LABEL: self._owner},
            limits=_limits(spec),
        )
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=fds[0],
                stderr=fds[1],
                cwd=out,
                env=proc_.ROOT_ENV,  # the job's own env is in its ENV_FILE
                start_new_session=True,
            )
        except OSError as e:
            raise BackendError(f"cannot start {record.backend_job_id}: {e}") from e

    def _job_env(self, spec: LaunchSpec, account: Account) -> dict[str, str]:
        env = proc_.job_env(
            job_id=spec.job_id,
            attempt=spec.attempt,
            gpus=spec.gpus,
            output_dir=spec.output_dir,
            account=account,
            user_env=spec.env,
            workdir=spec.workdir,
        )
        env.update(supervise.env_for_spec(spec))  # U7: the platform's, never the user's
        # U6/U7: -o/-e, --signal, srun (no Slurm of ours here); podman's init signals one child
        podman = self._isolation_for().podman is not None
        env.update(supervise.run_env(spec, forward=podman, srun="always"))
        if spec.workspace is not None:
            env = venv_env(env, spec.env)
        return iso_.job_env(self._isolation_for(), env)

    def _watch(self, record: JobRecord, process: asyncio.subprocess.Process | None) -> None:
        self._records[record.backend_job_id] = record
        watcher = ProcessWatcher(
            record, process, self.store, self.settings, self._on_kill_failed, self._ended
        )
        self._watchers[record.backend_job_id] = watcher
        watcher.start()

    def _ended(self, backend_job_id: str) -> None:
        if self._on_end is not None:
            self._on_end(backend_job_id)

    def _drained(self) -> dict[str, str]:
        return self.store.drained()

    def _on_kill_failed(self, record: JobRecord) -> None:
        """X5: the node of a job that outlived SIGKILL is drained with that reason."""
        reason = f"kill_failed: {record.backend_job_id} survived SIGKILL"
        self.store.set_drained(record.node, reason)
        log.error("node %s drained: %s", record.node, reason)

    def undrain(self, node: str) -> None:
        """An operator's `scontrol update state=resume`."""
        self.store.set_drained(node, None)


def _backend_id(job_id: str, attempt: int) -> str:
    return f"local-{job_id}-{attempt}"


def _limits(spec: LaunchSpec) -> iso_.Limits:
    """SEC6: what the tier promises; podman refuses more CPUs than the host has (a test
    machine's fake tiers promise more than its cores)."""
    return iso_.Limits(spec.mem_gb, min(spec.cpus, os.cpu_count() or 1))

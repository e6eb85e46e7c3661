"""The local backend's LLM backfill (SPEC B1–B3; contract in backfill_contract.py).

Each instance is a local process in its own session with `CUDA_VISIBLE_DEVICES=<gpu>`, a free
`PORT`, and its own directory `<data_dir>/backfill/<backfill_id>/` (script, stdout, stderr).
Records live apart from research attempts (`<data_dir>/local-backend/backfill/jobs/`), so the
agent's `running()` and orphan sweep never see them; the same ProcessWatcher enforces SIGTERM →
grace → SIGKILL and re-adopts instances after a restart of the backfill service.

Backfill runs as the service's own account and with network (it must serve its endpoint); it is
the operator's configured command, not a user's script.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from jpu.backends import process as proc_
from jpu.backends.backfill_contract import BackfillHandle, BackfillSpec
from jpu.backends.base import SAFE_ID, BackendError, BackendStatus, UnknownBackendJob
from jpu.backends.local.preempt import preempt
from jpu.backends.local.records import JobRecord, RecordStore
from jpu.backends.local.settings import LocalSettings
from jpu.backends.local.watch import ProcessWatcher, adopt_unsaved_spawn
from jpu.embedded.nats import free_port

log = logging.getLogger(__name__)


class LocalBackfill:
    """Mixed into LocalBackend: the BackfillBackend methods."""

    settings: LocalSettings
    _bf: _Instances | None = None

    def _instances(self) -> _Instances:
        if self._bf is None:
            self._bf = _Instances(self.settings)
        return self._bf

    async def submit_backfill(self, spec: BackfillSpec) -> BackfillHandle:
        return await self._instances().submit(spec)

    async def poll_backfill(self, backend_job_id: str) -> BackendStatus:
        record = self._instances().get(backend_job_id)
        if record.final is not None:
            return record.final
        return BackendStatus(state="RUNNING", started_at=record.started_at, node=record.node)

    async def cancel_backfill(self, backend_job_id: str, grace_s: float) -> None:
        inst = self._instances()
        record = inst.get(backend_job_id)
        watcher = inst.watchers.get(backend_job_id)
        if record.final is None and watcher is not None:
            watcher.request("cancel", grace_s)

    async def running_backfill(self) -> list[str]:
        inst = self._instances()
        inst.refresh()
        return sorted(b for b, r in inst.records.items() if r.final is None)

    async def preempt_backfill(
        self, node: str, tier: str, gpus: list[int], grace_s: float
    ) -> list[str]:
        return await preempt(self._instances().store, node, tier, gpus, grace_s)

    async def close_backfill(self) -> None:
        if self._bf is not None:
            for w in self._bf.watchers.values():
                await w.stop()
            self._bf.watchers.clear()


class _Instances:
    def __init__(self, settings: LocalSettings) -> None:
        self.settings = settings
        self.store = RecordStore(Path(settings.data_dir) / "local-backend" / "backfill")
        self.records: dict[str, JobRecord] = {}
        self.watchers: dict[str, ProcessWatcher] = {}
        self.loaded = False
        self.lock = asyncio.Lock()

    def load(self) -> None:
        """Once: re-adopt the instances a previous run of the service left running."""
        if self.loaded:
            return
        self.loaded = True
        for record in self.store.all():
            if record.pid == 0 and record.final is None:
                adopt_unsaved_spawn(record, self.store)  # spawned, pid unsaved (SPEC O5)
            self._watch(record, None)

    def get(self, bid: str) -> JobRecord:
        self.load()
        record = self.records.get(bid) or self.adopt(bid)
        if record is None:
            raise UnknownBackendJob(bid)
        return record

    def adopt(self, bid: str) -> JobRecord | None:
        """An instance another process (a replica of the service) launched: watch it too."""
        record = self.store.load(bid)
        if record is not None and record.pid == 0 and record.final is None:
            return None  # still spawning in the other process: not an instance yet
        if record is not None and bid not in self.records:
            self._watch(record, None)
        return self.records.get(bid)

    def refresh(self) -> None:
        self.load()
        for path in self.store.jobs.glob("*.json"):
            if path.stem not in self.records:
                self.adopt(path.stem)

    async def submit(self, spec: BackfillSpec) -> BackfillHandle:
        async with self.lock:
            self.load()
            bid = f"localbf-{spec.backfill_id}"
            if bid in self.records:  # idempotent per backfill id
                return BackfillHandle(backend_job_id=bid, endpoint=self._endpoint(bid))
            self._validate(spec)
            port = free_port()
            endpoint = f"http://127.0.0.1:{port}/v1"
            if not self._claim(bid, endpoint):  # another replica launches this very instance
                return await self._adopt_claimed(bid)
            out = Path(self.settings.data_dir) / "backfill" / spec.backfill_id
            out.mkdir(mode=0o700, parents=True, exist_ok=True)
            (out / "job.sh").write_text(spec.command + "\n")
            record = JobRecord(
                backend_job_id=bid,
                job_id=spec.backfill_id,
                attempt=1,
                user="backfill",
                account="backfill",
                node=spec.node,
                tier=spec.tier,
                gpus=[spec.gpu],
                output_dir=str(out),
                isolation="none",
            )
            proc_.clear_status(self.store.status_file(bid))
            self.store.save(record)  # before the spawn: a crash in between reads as ended
            process = await self._spawn(record, spec, port)
            record.pid, record.started_at = process.pid, time.time()
            record.ticks = proc_.start_ticks(process.pid) or 0
            self.store.save(record)
            self._watch(record, process)
        log.info("backfill %s started pid=%d on %s/%s#%d", bid, process.pid, *_where(spec))
        return BackfillHandle(backend_job_id=bid, endpoint=endpoint)

    def _claim(self, bid: str, endpoint: str) -> bool:
        """Exactly one process launches a backfill id: the one that creates its claim file."""
        try:
            fd = os.open(self._claim_path(bid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(endpoint)
        return True

    async def _adopt_claimed(self, bid: str) -> BackfillHandle:
        for _ in range(200):  # the claimer saves the record right after its claim
            if self.adopt(bid) is not None:
                break
            await asyncio.sleep(0.01)
        else:
            raise BackendError(f"{bid} is claimed but never recorded")
        return BackfillHandle(backend_job_id=bid, endpoint=self._endpoint(bid))

    def _claim_path(self, bid: str) -> Path:
        return self.store.path(bid).with_suffix(".endpoint")

    def _validate(self, spec: BackfillSpec) -> None:
        if not SAFE_ID.match(spec.backfill_id):
            raise BackendError(f"bad backfill id {spec.backfill_id!r}")
        node = next((n for n in self.settings.nodes if n.name == spec.node), None)
        if node is None or not 0 <= spec.gpu < node.gpus.get(spec.tier, 0):
            raise BackendError(f"no GPU {spec.node}/{spec.tier}#{spec.gpu}")

    def _endpoint(self, bid: str) -> str | None:
        try:
            return self._claim_path(bid).read_text().strip() or None
        except OSError:
            return None

    async def _spawn(
        self, record: JobRecord, spec: BackfillSpec, port: int
    ) -> asyncio.subprocess.Process:
        out = Path(record.output_dir)
        bindir = os.path.dirname(sys.executable)  # `python -m ...` resolves to our interpreter
        env = {
            "PATH": f"{bindir}:{proc_.DEFAULT_PATH}",
            "HOME": str(out),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            **spec.env,
            "CUDA_VISIBLE_DEVICES": str(spec.gpu),
            "PORT": str(port),
            "JPU_BACKFILL_ID": spec.backfill_id,
        }
        argv = [
            "bash",
            "-c",
            proc_.WRAPPER,
            "jpu-backfill",
            str(self.store.status_file(record.backend_job_id)),
            "bash",
            str(out / "job.sh"),
        ]
        try:
            with open(out / "stdout", "wb") as so, open(out / "stderr", "wb") as se:
                return await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=subprocess.DEVNULL,
                    stdout=so,
                    stderr=se,
                    cwd=out,
                    env=env,
                    start_new_session=True,
                )
        except OSError as e:
            self.store.forget(record.backend_job_id)
            self._claim_path(record.backend_job_id).unlink(missing_ok=True)
            raise BackendError(f"cannot start {record.backend_job_id}: {e}") from e

    def _watch(self, record: JobRecord, process: asyncio.subprocess.Process | None) -> None:
        self.records[record.backend_job_id] = record
        if record.final is not None:
            return
        watcher = ProcessWatcher(record, process, self.store, self.settings, _kill_failed)
        self.watchers[record.backend_job_id] = watcher
        watcher.start()


def _where(spec: BackfillSpec) -> tuple[str, str, int]:
    return spec.node, spec.tier, spec.gpu


def _kill_failed(record: JobRecord) -> None:
    log.error("backfill %s survived SIGKILL", record.backend_job_id)

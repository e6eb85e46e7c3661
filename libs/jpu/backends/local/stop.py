"""Stop everything the local backend runs, when the whole local stack stops (SPEC O2).

Jobs and backfill instances run in their own sessions so that they outlive a restart of the
slurm-agent or the backfill service (re-adoption, records.py). When `make run` itself stops,
nothing may be left behind: after the services have exited, `terminate_all` finds every live
process group from the persisted records, sends SIGTERM, waits up to `grace_s`, then SIGKILL.

Each stopped record gets a final status (NODE_FAIL, "the local stack stopped"), so a later
`make run` reports the attempt as lost with the platform, not as the job's own failure. Only
call it when no agent or backfill service of this data dir is running (it writes the records).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from jpu.backends import containers
from jpu.backends import process as proc_
from jpu.backends.base import BackendStatus
from jpu.backends.local.records import JobRecord, RecordStore

log = logging.getLogger(__name__)

STOP_REASON = "the local stack stopped"
_POLL_S = 0.05
_KILL_WAIT_S = 2.0


def record_stores(data_dir: Path) -> list[RecordStore]:
    """Research attempts (backend.py) and backfill instances (backfill_processes.py), where they
    exist (a data dir the local backend never used has neither)."""
    root = Path(data_dir) / "local-backend"
    roots = [root, root / "backfill"]
    return [RecordStore(r) for r in roots if (r / "jobs").is_dir()]


def live_records(data_dir: Path) -> list[tuple[RecordStore, JobRecord]]:
    """Every unfinished record whose process (pid + start time) still exists."""
    return [
        (store, r)
        for store in record_stores(data_dir)
        for r in store.all()
        if r.final is None and r.pid and proc_.is_alive(r.pid, r.ticks)
    ]


def terminate_all(data_dir: Path, grace_s: float = 5.0) -> list[str]:
    """SIGTERM every live job's and backfill instance's process group, SIGKILL what is left
    after `grace_s`; returns the backend ids stopped (SPEC O2: Ctrl-C leaves nothing behind)."""
    victims = live_records(data_dir)
    if not victims:
        return []
    groups = {r.pid for _, r in victims}  # each was started as a session (group) leader
    for _, r in victims:
        if r.container and containers.kill(r.podman, r.container, "TERM"):
            continue  # X5: straight to the job; its podman client follows it out
        proc_.signal_group(r.pid, signal.SIGTERM)
    if not _wait_gone(groups, grace_s):
        left = {g for g in groups if _members(g)}
        log.warning("local jobs ignored SIGTERM; killing", extra={"groups": sorted(left)})
        for pgid in left:
            proc_.signal_group(pgid, signal.SIGKILL)
        if not _wait_gone(left, _KILL_WAIT_S):
            log.error("local jobs survived SIGKILL", extra={"groups": sorted(left)})
    for store, record in victims:
        if record.container:  # X4a: a SIGKILL ends only the podman client, not the container
            containers.remove(record.podman, record.container)
        _finish(store, record)
    stopped = [r.backend_job_id for _, r in victims]
    log.info("stopped local jobs and backfill", extra={"stopped": stopped})
    return stopped


def _members(pgid: int) -> list[int]:
    """Live processes of the group (zombies have exited). A group id is never reused while a
    member exists, so this never names an unrelated process, unlike the leader's pid alone."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            pids.append(int(entry))
    return pids


def _wait_gone(groups: set[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(_members(g) for g in groups):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def _finish(store: RecordStore, record: JobRecord) -> None:
    """The final status a restarted backend reports instead of re-adopting a dead process."""
    rc, written_at = proc_.read_status(store.status_file(record.backend_job_id))
    out = Path(record.output_dir)
    record.final = BackendStatus(
        state="NODE_FAIL",
        exit_code=rc,
        started_at=record.started_at or None,
        ended_at=max(written_at or time.time(), record.started_at),
        signal=rc - 128 if rc is not None and rc > 128 else None,
        node=record.node,
        output_tail=proc_.tail([out / "stdout", out / "stderr"], 16 * 1024),
        isolation=record.isolation,
        reason=STOP_REASON,
    )
    try:
        store.save(record)
    except OSError as e:
        log.warning("cannot record the stop of %s: %s", record.backend_job_id, e)

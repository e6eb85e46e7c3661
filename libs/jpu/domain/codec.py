"""A ClusterState as bytes and back: the payload of a snapshot (SPEC O6). Pure.

A snapshot holds only what the fold cannot derive; the rest (GPU holders, slots, personal queues,
the global queue) is rebuilt from the jobs on load, exactly as the fold would have left it. The
frame is

    b"JPUSNAP\\n" + JSON header line + b"\\n" + msgpack payload

with the header naming the domain's schema version, the stream sequence the state covers, the
stream, and the payload's SHA-256. `unpack` refuses (SnapshotInvalid, with the reason) a frame
that is truncated, fails its checksum, or comes from another schema version: a reader then falls
back to an older snapshot or to a full replay.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Final

import msgspec

from jpu.config import Cluster
from jpu.domain.cluster import ClusterState, Maintenance, count_named, count_slot, forget
from jpu.domain.dependencies import ArrayProgress
from jpu.domain.runs import RecentRuns
from jpu.domain.states import QUEUED, JobView, queued_job
from jpu.domain.workspaces import Workspace
from jpu.policy.charging import Charge
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import LabUsage

# Bump when ClusterState, JobView or anything inside them changes shape or meaning: snapshots of
# another version are ignored (a full replay rebuilds the state under the new rules).
# 2: charge ids carry their job (bounded dedup); 3: recent runs; 4: dependencies, holds (Q8,
# Q9), array tasks (JobView.array_*, Q7); 5: arrays as parents (ClusterState.arrays, Q8);
# 6: workspaces and users' default workspaces (X4a, decided at submit on the fold)
SCHEMA_VERSION: Final = 6
MAGIC: Final = b"JPUSNAP\n"


class SnapshotInvalid(Exception):
    """The bytes are not a usable snapshot; the message says why."""


class Header(msgspec.Struct, frozen=True):
    schema: int
    seq: int
    stream: str
    sha256: str
    size: int
    written_at: float


class _Payload(msgspec.Struct):
    seq: int
    jobs: list[JobView]
    inventory: list[tuple[str, str, int]]
    down: list[tuple[str, str, int]]
    backfill: list[tuple[str, str, int, str]]
    usage: dict[str, LabUsage]
    lab_seq: dict[str, int]
    charged: list[tuple[str, str | None]]  # (UsageCharged id, its job: None for a lab's)
    owed: list[Charge]
    maintenance: Maintenance
    runs: RecentRuns
    finals: list[tuple[str, str, str, bool]] = []  # Q8: (job id, lab, final state, started)
    arrays: list[ArrayProgress] = []  # Q8: arrays with a task left, as whole-array parents
    workspaces: list[Workspace] = []  # X4a: as folded (no source, no build log)
    default_workspace: dict[str, str] = {}  # X4a: user -> default workspace's name


def pack(state: ClusterState, stream: str, written_at: float) -> bytes:
    payload = msgspec.msgpack.encode(
        _Payload(
            seq=state.seq,
            jobs=list(state.jobs.values()),
            inventory=[(n, t, c) for (n, t), c in state.inventory.items()],
            down=sorted(state.down),
            backfill=[(n, t, i, b) for (n, t, i), b in state.backfill.items()],
            usage=dict(state.usage),
            lab_seq=dict(state.lab_seq),
            charged=_charged(state),
            owed=list(state.owed.values()),
            maintenance=state.maintenance,
            runs=state.runs,
            finals=[(j, lab, f, s) for j, (lab, f, s) in state.finals.items()],
            arrays=list(state.arrays.values()),
            workspaces=list(state.workspaces.values()),
            default_workspace=dict(state.default_workspace),
        )
    )
    header = Header(
        schema=SCHEMA_VERSION,
        seq=state.seq,
        stream=stream,
        sha256=hashlib.sha256(payload).hexdigest(),
        size=len(payload),
        written_at=written_at,
    )
    return MAGIC + msgspec.json.encode(header) + b"\n" + payload


def _charged(state: ClusterState) -> list[tuple[str, str | None]]:
    of_jobs = {c: j for j, ids in state.charged_by_job.items() for c in ids}
    return sorted((c, of_jobs.get(c)) for c in state.charged_ids)


def read_header(data: bytes) -> tuple[Header, memoryview]:
    """The header and a view of the payload (not a copy: a snapshot is tens of MB)."""
    if not data.startswith(MAGIC):
        raise SnapshotInvalid("not a snapshot (no JPUSNAP marker)")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise SnapshotInvalid("truncated header")
    head, payload = data[len(MAGIC) : end], memoryview(data)[end + 1 :]
    try:
        header = msgspec.json.decode(head, type=Header)
    except (msgspec.DecodeError, msgspec.ValidationError, json.JSONDecodeError) as e:
        raise SnapshotInvalid(f"unreadable header: {e}") from e
    return header, payload


def unpack(data: bytes, cluster: Cluster) -> tuple[Header, ClusterState]:
    """The state a snapshot holds, checked; raises SnapshotInvalid."""
    header, payload = read_header(data)
    if header.schema != SCHEMA_VERSION:
        raise SnapshotInvalid(f"schema version {header.schema}, this build reads {SCHEMA_VERSION}")
    if len(payload) != header.size or hashlib.sha256(payload).hexdigest() != header.sha256:
        raise SnapshotInvalid("checksum mismatch (truncated or corrupted payload)")
    try:
        p = msgspec.msgpack.decode(payload, type=_Payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise SnapshotInvalid(f"undecodable payload: {e}") from e
    if p.seq != header.seq:
        raise SnapshotInvalid(f"payload covers seq {p.seq}, header says {header.seq}")
    return header, _restore(p, cluster)


def _restore(p: _Payload, cluster: Cluster) -> ClusterState:
    state = ClusterState.new(cluster)
    state.seq = p.seq
    state.inventory = {(n, t): c for n, t, c in p.inventory}
    state.down = set(p.down)
    state.backfill = {(n, t, i): b for n, t, i, b in p.backfill}
    state.usage = dict(p.usage)
    state.lab_seq = dict(p.lab_seq)
    for charge_id, job_id in p.charged:
        state.charged_ids.add(charge_id)
        if job_id is not None:
            state.charged_by_job.setdefault(job_id, set()).add(charge_id)
    state.owed = {c.charge_id: c for c in p.owed}
    state.maintenance = p.maintenance
    state.runs = p.runs
    state.workspaces = {w.workspace_id: w for w in p.workspaces}
    state.default_workspace = dict(p.default_workspace)
    state.finals = OrderedDict((j, (lab, f, s)) for j, lab, f, s in p.finals)
    state.arrays = {a.array_id: a for a in p.arrays}
    with_jobs(state, p.jobs)
    return state


def with_jobs(state: ClusterState, jobs: Iterable[JobView]) -> None:
    """Put `jobs` into `state` with what the fold derives from them (GPU holders, slots,
    personal queues, the global queue), exactly as it keeps them (jpu.domain.cluster._job,
    _submitted): a snapshot's load, and the forward estimate's own copy of the fold."""
    queued = []
    for job in sorted(jobs, key=lambda j: j.submit_seq):
        state.jobs[job.job_id] = job
        state.holders.update(job.gpu_holdings())
        if job.holds_slot:
            state.slots[job.user] = state.slots_of(job.user) + 1
            count_named(state, job, 1)
            if job.array_id is not None:
                count_slot(state.array_slots, job.array_id, 1)
        if job.state == "PERSONAL_QUEUE_WAIT":
            state.personal.setdefault(job.user, {})[job.job_id] = None
            for _, parent in job.waiting or ():
                state.dependents.setdefault(parent, {})[job.job_id] = None
        if job.state in QUEUED:
            queued.append(queued_job(job))
    state.queue = LabQueues(queued)


def assign(target: ClusterState, source: ClusterState) -> None:
    """Make `target` (an object the service already holds) the restored state, keeping its own
    `keep_ended` (a service that drops ended jobs drops them from the snapshot too)."""
    for name in ClusterState.__dataclass_fields__:
        if name not in ("keep_ended", "just_woken"):
            setattr(target, name, getattr(source, name))
    if not target.keep_ended:
        for job_id in [j.job_id for j in target.jobs.values() if j.terminal and not j.oom_pending]:
            forget(target, job_id)

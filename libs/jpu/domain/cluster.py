"""The cluster state as a fold of the event log: `evolve(state, delivered)` (SPEC E2, S3).

Services (dispatcher, intake, accounting) rebuild a `ClusterState` at start by replaying the log
from sequence 1 and then keep applying new events in stream order, so their state is always the
state of a prefix of the log — never something they "assumed". Mutable for speed, deterministic:
the same events give the same state. `snapshot(state, config)` turns it into the policy core's
`Snapshot` (jpu.policy.model).

The GPU pool starts from the configured nodes; `NodeInventoryObserved` replaces a node's view.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

from jpu.config import Cluster
from jpu.domain.arrays import tasks_of
from jpu.domain.dependencies import ArrayProgress, Condition, array_verdict, parsed, verdict
from jpu.domain.runs import RecentRuns, observe
from jpu.domain.states import PLACED, QUEUED, GpuKey, JobView, apply_job_event, queued_job
from jpu.domain.workspaces import Workspace
from jpu.domain.workspaces import apply as apply_workspace
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    Delivered,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobHeld,
    JobPromoted,
    JobReleased,
    JobRetryDeclined,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    MaintenanceChanged,
    NodeInventoryObserved,
    ReservationGrown,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
    UsageCharged,
    WorkspaceDefaultChanged,
    WorkspaceEvent,
)
from jpu.policy.charging import Charge, charge_for
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import LabUsage

BUSY = PLACED - {"CANCELLING"}  # a user job holds GPUs (M2 also counts CANCELLING)
# Q8: how many jobs that ended for good are remembered as parents (bounded by count, not time,
# so a replay remembers the same ones); a dependency on one forgotten is refused at submit.
MAX_FINALS = 50_000


@dataclass
class Maintenance:
    state: str = "NORMAL"
    since: float = 0.0
    message: str = ""
    by: str = ""
    last_seq: int = 0  # stream seq of the last MaintenanceChanged (optimistic concurrency)


@dataclass(slots=True)
class ClusterState:
    seq: int = 0  # last stream sequence applied
    jobs: dict[str, JobView] = field(default_factory=dict)
    inventory: dict[tuple[str, str], int] = field(default_factory=dict)  # (node, tier) -> count
    down: set[GpuKey] = field(default_factory=set)
    holders: dict[GpuKey, str] = field(default_factory=dict)  # "job:<id>" | "reserved:<id>"
    backfill: dict[GpuKey, str] = field(default_factory=dict)  # GPU -> backfill id
    usage: dict[str, LabUsage] = field(default_factory=dict)
    lab_seq: dict[str, int] = field(default_factory=dict)  # lab subject -> last stream seq
    # Ids of the UsageCharged that could still be called for again (dedup, F5): the labs'
    # initial charges and the charges of jobs in the hot state. A job that left it can owe
    # nothing more (charge_for needs the job), so its ids leave with it (SPEC O6).
    charged_ids: set[str] = field(default_factory=set)
    charged_by_job: dict[str, set[str]] = field(default_factory=dict)
    # F4: charges the log owes (an attempt ended, a reservation charged at release) that no
    # UsageCharged has settled yet; the cycle ranks with them (D1, jpu.policy.charging)
    owed: dict[str, Charge] = field(default_factory=dict)
    maintenance: Maintenance = field(default_factory=Maintenance)
    runs: RecentRuns = field(default_factory=RecentRuns)  # U4: recent run times (bounded)
    # user -> job ids, oldest first; an ordered set (a dict's keys), so a job leaving from behind
    # a long queue (an array's tasks waiting, Q8) costs O(1), not a scan of the queue
    personal: dict[str, dict[str, None]] = field(default_factory=dict)
    slots: dict[str, int] = field(default_factory=dict)  # user -> slot-holding jobs (S1)
    array_slots: dict[str, int] = field(default_factory=dict)  # array -> its tasks' slots (Q7)
    # the global queue (GLOBAL_QUEUE_WAIT, RESERVING) grouped by lab for the cycle (D1), kept
    # up to date event by event so a cycle never rebuilds or sorts it
    queue: LabQueues = field(default_factory=LabQueues)
    # SPEC O6: a job that ended for good leaves the hot state (the log and the projections keep
    # its history), so memory follows the work in flight, not the platform's age. Services fold
    # with keep_ended=False; tools and tests that look at ended jobs keep them.
    keep_ended: bool = True
    # Q8: parent id -> personal-queue jobs with a condition on it not resolved yet, in the order
    # they began to wait (the order they are looked at again); an ordered set (a dict's keys), so
    # adding the N tasks of an array that waits on one parent is O(N), not O(N²)
    dependents: dict[str, dict[str, None]] = field(default_factory=dict)
    # Q8: jobs that ended for good, oldest first: id -> (lab, final state, ever started); an
    # OrderedDict because the oldest leaves at every end (a dict's first key is O(deleted))
    finals: OrderedDict[str, tuple[str, str, bool]] = field(default_factory=OrderedDict)
    # Q8: arrays with a task not ended for good -> what their tasks did (a whole-array parent);
    # once every task ended the array joins `finals` like a job
    arrays: dict[str, ArrayProgress] = field(default_factory=dict)
    # Q8 singleton: (user, name) -> slot-holding jobs (S1)
    named: dict[tuple[str, str], int] = field(default_factory=dict)
    # X4a: every workspace by id as its events leave it (without its source and build log, which
    # no decision reads), and each user's default workspace: a submit is decided on these, the
    # log's own order, never on a projection that may lag it
    workspaces: dict[str, Workspace] = field(default_factory=dict)
    default_workspace: dict[str, str] = field(default_factory=dict)  # user -> workspace name
    # the job the last event dropped (for on_event callbacks); not part of the state proper
    just_ended: JobView | None = field(default=None, compare=False)
    # users whose jobs the last event's parent resolved (Q8), for on_event callbacks; likewise
    just_woken: set[str] = field(default_factory=set, compare=False)
    # what the last job event's job held before and after it (P1), for on_event callbacks that
    # follow the GPUs (the simulated cluster); None when the event was not a job's; likewise
    just_held: tuple[dict[GpuKey, str], dict[GpuKey, str]] | None = field(
        default=None, compare=False
    )

    @classmethod
    def new(cls, cluster: Cluster, *, keep_ended: bool = True) -> ClusterState:
        state = cls(keep_ended=keep_ended)
        for node in cluster.nodes:
            for tier, count in node.gpus.items():
                state.inventory[(node.name, tier)] = count
        return state

    def job_seen(self, job_id: str) -> JobView | None:
        """The job, or the one the event just applied made leave the hot state (SPEC O6)."""
        job = self.jobs.get(job_id)
        if job is None and self.just_ended is not None and self.just_ended.job_id == job_id:
            return self.just_ended
        return job

    def slots_of(self, user: str) -> int:
        return self.slots.get(user, 0)

    def active_backfills(self) -> int:
        return len(self.backfill)

    def busy_user_jobs(self) -> int:
        """Jobs holding GPUs for M2: DISPATCHED/RUNNING, or CANCELLING after a dispatch."""
        return sum(1 for j in self.jobs.values() if j.state in BUSY or j.cancelling_dispatched)


def evolve(state: ClusterState, delivered: Delivered) -> None:
    """Apply one event (in stream order). Events at or below `state.seq` are ignored."""
    if delivered.seq <= state.seq:
        return
    state.seq = delivered.seq
    state.just_ended = state.just_held = None
    if state.just_woken:
        state.just_woken = set()
    event = delivered.event
    if isinstance(event, UsageCharged):
        state.usage[event.lab] = LabUsage(event.value_after, event.as_of)
        state.lab_seq[event.lab] = delivered.seq
        state.owed.pop(event.event_id, None)
        _charged(state, event)
    elif isinstance(event, MaintenanceChanged):
        m = Maintenance(event.state, event.ts, event.message, event.by, delivered.seq)
        state.maintenance = m
    elif isinstance(event, NodeInventoryObserved):
        _inventory(state, event)
    elif isinstance(event, BackfillStarted | BackfillEnded):
        backfilled(state.backfill, event)
    elif isinstance(event, JobSubmitted):
        _submitted(state, event, delivered.seq)
    elif isinstance(event, WorkspaceEvent):
        _workspace(state, event, delivered.seq)
    elif isinstance(event, WorkspaceDefaultChanged):
        if event.workspace is None:
            state.default_workspace.pop(event.user, None)
        else:
            state.default_workspace[event.user] = event.workspace
    else:
        if isinstance(event, JobEnded | ReservationReleased):
            _owe(state, event)
        _job(state, delivered)
        if isinstance(event, JobEnded):
            observe(state.runs, state.job_seen(event.job_id), event)


def _workspace(state: ClusterState, event: WorkspaceEvent, seq: int) -> None:
    """X4a: the workspace's fold (jpu.domain.workspaces.apply), kept lean."""
    ws = apply_workspace(state.workspaces.get(event.workspace_id), event, seq)
    if ws is None:
        state.workspaces.pop(event.workspace_id, None)
    else:
        state.workspaces[event.workspace_id] = replace(ws, source="", log="")


def _charged(state: ClusterState, event: UsageCharged) -> None:
    if event.job_id is None:  # a lab's initial charge: once ever (bounded by the labs)
        state.charged_ids.add(event.event_id)
    elif event.job_id in state.jobs:  # the job's events may still call for it again
        state.charged_ids.add(event.event_id)
        state.charged_by_job.setdefault(event.job_id, set()).add(event.event_id)
    # else: the job left the hot state (or was never seen): nothing can charge it again


def forget(state: ClusterState, job_id: str) -> JobView:
    """A job leaves the hot state (SPEC O6), with the charge ids only it could repeat."""
    job = state.jobs.pop(job_id)
    state.charged_ids.difference_update(state.charged_by_job.pop(job_id, ()))
    return job


def _owe(state: ClusterState, event: JobEnded | ReservationReleased) -> None:
    def job_of(job_id: str) -> tuple[str, int] | None:
        job = state.jobs.get(job_id)
        return None if job is None else (job.lab, job.attempt)

    c = charge_for(event, job_of)
    if c is not None and c.charge_id not in state.charged_ids:
        state.owed[c.charge_id] = c


def observed(event: NodeInventoryObserved) -> tuple[dict[tuple[str, str], int], set[GpuKey]]:
    """A node as an observation reports it (P2): its GPU count per (node, tier), and the GPUs
    that take no work — every GPU of a drained or down node at once, and the failed ones."""
    all_down = event.state != "up"  # a drained or down node takes no new work
    down = {
        (event.node, tier, i)
        for tier, count in event.gpus.items()
        for i in range(count)
        if all_down or i in event.down.get(tier, [])
    }
    return {(event.node, tier): count for tier, count in event.gpus.items()}, down


def _inventory(state: ClusterState, event: NodeInventoryObserved) -> None:
    for key in [k for k in state.inventory if k[0] == event.node]:
        del state.inventory[key]
    inventory, down = observed(event)
    state.inventory.update(inventory)
    state.down = {g for g in state.down if g[0] != event.node} | down


def backfilled(backfill: dict[GpuKey, str], event: BackfillStarted | BackfillEnded) -> None:
    """B1–B3: which backfill instance runs on each GPU (an end only ends its own instance)."""
    key = (event.node, event.tier, event.gpu)
    if isinstance(event, BackfillStarted):
        backfill[key] = event.backfill_id
    elif backfill.get(key) == event.backfill_id:
        del backfill[key]


def hold(holders: dict[GpuKey, str], before: dict[GpuKey, str], after: dict[GpuKey, str]) -> None:
    """A job's holdings (its JobView's, P1) moved from `before` to `after`: a GPU it left is
    released only if it is still its own (another job may hold it since); the rest are its."""
    for gpu, tag in before.items():
        if holders.get(gpu) == tag:
            del holders[gpu]
    holders.update(after)


def _submitted(state: ClusterState, event: JobSubmitted, seq: int) -> None:
    """Q4; an array's one event creates every task (Q7), each a job in the personal queue;
    a dependency (Q8) is resolved now or waits for its parents."""
    tasks = tasks_of(event)
    dependency = parsed(event.dependency)  # read once: every task of an array has the same
    if tasks[0].job_id != event.job_id and event.job_id not in state.arrays:
        state.arrays[event.job_id] = ArrayProgress(event.job_id, event.lab, len(tasks))
    for job_event in tasks:
        if job_event.job_id in state.jobs:
            continue  # a duplicate submit can only be refused by expected seq 0; keep the first
        job = JobView.submitted(job_event, seq, dependency)
        state.jobs[job.job_id] = job
        state.personal.setdefault(job.user, {})[job.job_id] = None
        if job_event.dependency:
            job.waiting = []
            for c in dependency.conditions:
                _condition(state, job, c)


def parent_facts(state: ClusterState, job_id: str) -> tuple[str, bool, str | None] | None:
    """Q8: (lab, ever started, final state) of a job — or a whole array — the state knows;
    None: unknown."""
    job = state.jobs.get(job_id)
    if job is not None:
        return job.lab, _started(job), job.final
    array = state.arrays.get(job_id)
    if array is not None:
        return array.lab, array.started >= array.total, array.final
    known = state.finals.get(job_id)
    return None if known is None else (known[0], known[2], known[1])


def _condition(state: ClusterState, job: JobView, c: Condition) -> None:
    """Q8: resolve one condition of `job` now, or wait for its parent's next step."""
    array = state.arrays.get(c[1])
    if c[1] in (job.job_id, job.array_id):
        v = "never"  # on itself (or its own array): it would wait for ever
    elif array is not None:
        v = array_verdict(c[0], array)  # all its tasks (Slurm's semantics)
    else:
        facts = parent_facts(state, c[1])
        v = "never" if facts is None else verdict(c[0], facts[1], facts[2])  # unknown: never
    if v == "never" and job.never is None:
        job.never = f"{c[0]}:{c[1]}"
    elif v == "wait" and job.waiting is not None:
        job.waiting.append(c)
        state.dependents.setdefault(c[1], {})[job.job_id] = None  # kept at its first place


def _started(job: JobView) -> bool:
    return job.ever_started or job.attempt > 1


def _parent_moved(state: ClusterState, parent_id: str) -> None:
    """Q8: the parent (a job or an array) started or ended for good: look again at what waits
    on it."""
    children = state.dependents.pop(parent_id, None)
    if not children:
        return
    for child_id in children:
        child = state.jobs.get(child_id)
        if child is None or child.waiting is None or child.state != "PERSONAL_QUEUE_WAIT":
            continue  # it left the personal queue meanwhile: nothing to decide
        state.just_woken.add(child.user)
        mine = [c for c in child.waiting if c[1] == parent_id]
        child.waiting = [c for c in child.waiting if c[1] != parent_id]
        for c in mine:
            _condition(state, child, c)


def _remember_final(state: ClusterState, job: JobView) -> None:
    """Q8: a job that ended for good, for dependencies submitted after it ended."""
    if job.final is None:
        return
    _remember(state, job.job_id, (job.lab, job.final, _started(job)))


def _remember(state: ClusterState, parent_id: str, facts: tuple[str, str, bool]) -> None:
    state.finals[parent_id] = facts
    while len(state.finals) > MAX_FINALS:
        state.finals.popitem(last=False)


def _task_moved(state: ClusterState, job: JobView, was_started: bool, ended: bool) -> None:
    """Q8: a task of an array started for the first time or ended for good: its array's
    progress as a whole-array parent; the array is remembered once its last task ended."""
    array = state.arrays.get(job.array_id or "")
    if array is None:
        return
    if not was_started and (ended or _started(job)):
        array.started += 1
    if ended:
        array.ended += 1
        array.completed += job.final == "COMPLETED"
    if array.final is not None:
        del state.arrays[array.array_id]
        _remember(state, array.array_id, (array.lab, array.final, True))
    if array.array_id in state.dependents:
        _parent_moved(state, array.array_id)


def count_slot(counts: dict[str, int], key: str, delta: int) -> None:
    """Add `delta` to a slot count, leaving no zero entries (a restored state has none)."""
    n = counts.get(key, 0) + delta
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)


_JOB_EVENTS = (
    JobPromoted,
    ReservationStarted,
    ReservationGrown,
    ReservationShrunk,
    ReservationReleased,
    JobDispatched,
    JobStarted,
    JobEnded,
    JobRetryScheduled,
    JobRetryDeclined,
    JobCancelRequested,
    JobHeld,
    JobReleased,
)


# The events that can end a job for good (S2, X8): only they can decide its dependents (Q8).
_FINAL_EVENTS = (JobEnded, JobRetryDeclined, JobCancelRequested)


def count_named(state: ClusterState, job: JobView, delta: int) -> None:
    """Q8 singleton: slot-holding jobs per (user, name), kept beside S1's per-user count."""
    key = (job.user, job.name)
    n = state.named.get(key, 0) + delta
    if n > 0:
        state.named[key] = n
    else:
        state.named.pop(key, None)


def _job(state: ClusterState, delivered: Delivered) -> None:
    event = delivered.event
    if not isinstance(event, _JOB_EVENTS):
        return
    job = state.jobs.get(event.job_id)
    if job is None:
        return  # events of a job whose submit we never saw (foreign writer): ignore
    was_slot, was_personal = job.holds_slot, job.state == "PERSONAL_QUEUE_WAIT"
    may_end = isinstance(event, _FINAL_EVENTS) and job.final is None
    was_started = job.array_id is not None and _started(job)  # (read for a task only)
    placed, reserved, before = job.placement, job.reservation, job.gpu_holdings()
    apply_job_event(job, delivered)
    # what it holds derives from these two alone (most events leave both as they were)
    same = job.placement is placed and job.reservation is reserved
    after = before if same else job.gpu_holdings()
    hold(state.holders, before, after)
    state.just_held = (before, after)
    ended = may_end and job.final is not None
    if ended:
        _remember_final(state, job)
        if job.job_id in state.dependents:
            _parent_moved(state, job.job_id)
    elif type(event) is JobStarted and job.job_id in state.dependents:
        _parent_moved(state, job.job_id)  # `after` is met; other kinds wait on (re-registered)
    if job.array_id is not None and (ended or was_started != _started(job)):
        _task_moved(state, job, was_started, ended)
    if job.state in QUEUED:
        state.queue.put(queued_job(job))  # entered, or its record (reservation, attempt) changed
    else:
        state.queue.discard(job.job_id)
    if was_slot != job.holds_slot:
        delta = 1 if job.holds_slot else -1
        slots = state.slots_of(job.user) + delta
        if slots:
            state.slots[job.user] = slots
        else:  # no empty entries: a state restored from a snapshot has none either
            state.slots.pop(job.user, None)
        count_named(state, job, delta)
        if job.array_id is not None:
            count_slot(state.array_slots, job.array_id, 1 if job.holds_slot else -1)
    if was_personal and job.state != "PERSONAL_QUEUE_WAIT":
        queue = state.personal.get(job.user, {})
        queue.pop(job.job_id, None)
        if not queue:
            state.personal.pop(job.user, None)
    if job.final and not state.keep_ended:
        # S2: nothing can move it again; its GPUs are released above
        state.just_ended = forget(state, job.job_id)

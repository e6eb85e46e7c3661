"""Crash-safety harness (SPEC E2, E3, F5, O5): faults, recovery times, and the
invariants read back from the log itself.

- `KillableNats` / `KillablePostgres`: embedded servers a test owns, SIGKILLed (NATS) or stopped in
  immediate mode (PostgreSQL) and restarted on the same data dir and port.
- `Fault` / `recovery_summary`: what was injected and how long the platform took to come back.
- `check_log(log, config)`: the invariants that must hold on the whole log, whatever crashed:
  every job in exactly one terminal state, no attempt dispatched (started, ended) twice, no GPU
  held by two jobs at once, every charge the log owes landed exactly once with its amount, and
  each lab's usage chain reproduces F3.
- `compare_api(check, api_jobs, api_labs)`: the REST API's rows against the log's fold.

Everything here is pure over the log and the API's answers, so a test can show the checker
catches what it must (tests/unit/test_crash_invariants.py).
"""

from __future__ import annotations

import math
import signal
import statistics
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from jpu.bus import Delivered
from jpu.config import Config
from jpu.domain.arrays import tasks_of
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.states import TERMINAL
from jpu.embedded.nats import EmbeddedNats
from jpu.embedded.postgres import EmbeddedPostgres
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobEvent,
    JobRetryDeclined,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    ReservationGrown,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
    UsageCharged,
)

REL_TOL = 1e-6  # F5: floating-point noise < 1e-6 relative
ABS_TOL = 1e-6  # TFLOP-s; for amounts near zero
HELD_SLACK_S = 0.05  # file mtimes vs the agent's clock (coarse kernel timestamps)


# --- servers that can be killed and restarted --------------------------------------------------


class KillableNats(EmbeddedNats):
    """An embedded nats-server on a fixed port: `kill()` is SIGKILL, `start()` brings it back
    on the same store (JetStream recovers its stream from the files)."""

    def kill(self) -> subprocess.Popen[bytes] | None:
        """SIGKILL without waiting (callable from an event callback); wait on the result."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        return proc

    def freeze(self, frozen: bool = True) -> None:
        """SIGSTOP (or, `frozen=False`, SIGCONT): alive but silent, no socket closes — what a
        lost host looks like to its peers and clients."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGSTOP if frozen else signal.SIGCONT)


class KillablePostgres(EmbeddedPostgres):
    """An embedded PostgreSQL on a fixed port: `stop_immediate()` is `pg_ctl stop -m immediate`
    (SIGQUIT to the postmaster: no checkpoint, crash recovery at the next start), `start()`
    brings it back on the same data dir."""

    def stop_immediate(self) -> subprocess.Popen[bytes] | None:
        """SIGQUIT without waiting (callable from an event callback); wait on the result."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGQUIT)
        return proc


def wait_exited(proc: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> None:
    """Wait for a killed server; SIGKILL it if it outlives `timeout`."""
    if proc is None:
        return
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


# --- faults and recovery -----------------------------------------------------------------------


@dataclass
class Fault:
    kind: str  # "kill:<service>", "nats-kill", "postgres-immediate"
    trigger: str  # what it was injected right after (an event type), or "at random"
    at: float  # wall clock (time.time()) of the injection
    seq_at: int = 0  # the stream's last seq when it was injected
    down_s: float = 0.0  # deliberate outage (server kept down) before the restart
    recovered_s: float | None = None  # None: did not recover within the bound
    note: str = ""


def recovery_summary(faults: Iterable[Fault]) -> dict[str, dict[str, float | int | None]]:
    """Per fault kind: how many, and the median and max recovery time (s)."""
    by_kind: dict[str, list[Fault]] = defaultdict(list)
    for f in faults:
        by_kind[f.kind].append(f)
    out: dict[str, dict[str, float | int | None]] = {}
    for kind in sorted(by_kind):
        done = [f.recovered_s for f in by_kind[kind] if f.recovered_s is not None]
        out[kind] = {
            "n": len(by_kind[kind]),
            "unrecovered": len(by_kind[kind]) - len(done),
            "median_s": round(statistics.median(done), 2) if done else None,
            "max_s": round(max(done), 2) if done else None,
        }
    return out


# --- the invariants, from the log --------------------------------------------------------------


@dataclass
class Charge:
    charge_id: str
    lab: str
    amount: float
    job_id: str
    source: str  # "JobEnded" | "ReservationReleased"
    seq: int


@dataclass
class LogCheck:
    state: ClusterState  # the fold of the whole log (ended jobs kept)
    violations: list[str] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)
    jobs: dict[str, list[Delivered]] = field(default_factory=dict)  # job id -> its events
    owed: dict[str, Charge] = field(default_factory=dict)  # charge id -> what the log owes
    charged: dict[str, list[UsageCharged]] = field(default_factory=dict)  # charge id -> events
    charged_by_job: dict[str, float] = field(default_factory=dict)  # job id -> TFLOP-s
    last_attempt: dict[str, dict[str, Delivered]] = field(default_factory=dict)
    # seqs of the JobDispatched the fold applied: one that lost a race (its job was cancelled
    # first, or already placed) moves nothing, so no GPU, placement or end is checked against it
    applied_dispatches: set[int] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.violations


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def end_amount(e: JobEnded) -> float:
    """What a JobEnded charges (F1, F4, F5): its `usage`, or for events without one the held
    GPU-seconds × TFLOPS."""
    if e.usage:
        return e.usage
    return (e.gpu_seconds_startup + e.gpu_seconds_run + e.gpu_seconds_reserved) * e.tflops


def _placed(state: ClusterState, event: object) -> bool:
    """Whether the fold has `event`'s job DISPATCHED (only asked for a JobDispatched): a
    dispatch the fold applied is the one that moved its job there (jpu.domain.states)."""
    if not isinstance(event, JobDispatched):
        return False
    job = state.jobs.get(event.job_id)
    return job is not None and job.state == "DISPATCHED"


def check_log(log: Sequence[Delivered], config: Config) -> LogCheck:
    """Every invariant that must hold on a log the platform wrote, however it crashed."""
    state = ClusterState.new(config, keep_ended=True)
    check = LogCheck(state)
    for d in log:
        placed_before = _placed(state, d.event)
        evolve(state, d)
        if not placed_before and _placed(state, d.event):
            check.applied_dispatches.add(d.seq)
        check.stats[type(d.event).__name__] += 1
        if isinstance(d.event, JobSubmitted):  # an array's one event: each task a job (Q7)
            for task in tasks_of(d.event):
                check.jobs.setdefault(task.job_id, []).append(
                    msgspec.structs.replace(d, event=task)
                )
        elif isinstance(d.event, JobEvent):
            check.jobs.setdefault(d.event.job_id, []).append(d)
    _check_order(log, check)
    for job_id, events in check.jobs.items():
        _check_job(job_id, events, config, check)
    _check_gpus(log, check)
    _check_charges(log, check, config.half_life_s)
    for job in state.jobs.values():
        check.stats[f"final:{job.state}"] += 1
    return check


def _check_order(log: Sequence[Delivered], check: LogCheck) -> None:
    seqs = [d.seq for d in log]
    if seqs != sorted(set(seqs)):
        check.violations.append("the log read back is not in strictly increasing seq order")
    ids = Counter(d.event.event_id for d in log)
    dups = [i for i, n in ids.items() if n > 1]
    if dups:  # Nats-Msg-Id = event_id: a retried append must never land twice
        check.violations.append(f"{len(dups)} event ids appear more than once, e.g. {dups[:3]}")


def _check_job(job_id: str, events: list[Delivered], config: Config, check: LogCheck) -> None:
    bad = check.violations
    tiers = {t.name: t for t in config.tiers}
    first = events[0].event
    if not isinstance(first, JobSubmitted):
        bad.append(f"{job_id}: first event is {type(first).__name__}, not JobSubmitted")
        return
    if sum(isinstance(d.event, JobSubmitted) for d in events) != 1:
        bad.append(f"{job_id}: JobSubmitted appears more than once")
    per_attempt: dict[tuple[str, int], int] = Counter()
    dispatched: dict[int, JobDispatched] = {}
    started: dict[int, JobStarted] = {}
    attempt = 1  # the attempt the next dispatch must carry
    min_vram = first.min_vram_gb
    oom_end: JobEnded | None = None  # an OOM end whose retry is not decided yet
    final_end_at: int | None = None  # index of the end that made the job terminal for good
    for i, d in enumerate(events):
        e = d.event
        # S2: after the end only the X8 decision (and a cancel before it) may follow
        after_end_ok = isinstance(e, JobRetryDeclined | JobRetryScheduled) or (
            isinstance(e, JobCancelRequested) and oom_end is not None
        )
        if final_end_at is not None and not after_end_ok:
            bad.append(f"{job_id}: {type(e).__name__} at seq {d.seq} after it ended (S2)")
        if isinstance(e, JobDispatched) and d.seq not in check.applied_dispatches:
            # E2: a dispatch that lost the race to its job's cancel (seed 154951, after leader
            # kills: both landed, on one expected seq it seems) moves nothing: the fold, the agent
            # and the API ignore it. A second placement of a placed attempt is still O5's breach.
            if e.attempt in dispatched:
                bad.append(f"{job_id}: attempt {e.attempt} dispatched twice (seq {d.seq}, O5)")
            else:
                check.stats["dispatch_not_applied"] += 1
            continue
        if isinstance(e, JobDispatched | JobStarted | JobEnded):
            per_attempt[(type(e).__name__, e.attempt)] += 1
            if per_attempt[(type(e).__name__, e.attempt)] == 2:
                what = "dispatched" if isinstance(e, JobDispatched) else type(e).__name__
                bad.append(f"{job_id}: attempt {e.attempt} {what} twice (seq {d.seq}, O5)")
        if isinstance(e, JobDispatched):
            if e.attempt != attempt:
                bad.append(f"{job_id}: dispatched as attempt {e.attempt}, expected {attempt}")
            dispatched.setdefault(e.attempt, e)
            tier = tiers.get(e.tier)
            if len(e.gpus) != first.num_gpus or len(set(e.gpus)) != len(e.gpus):
                bad.append(f"{job_id}: dispatched on GPUs {e.gpus} for num_gpus={first.num_gpus}")
            if tier is None or (first.tiers is not None and e.tier not in first.tiers):
                bad.append(f"{job_id}: dispatched on tier {e.tier} it does not allow (D2)")
            elif min_vram is not None and tier.vram_gb < min_vram:
                bad.append(f"{job_id}: attempt {e.attempt} on {e.tier} below {min_vram} GB (X8)")
        elif isinstance(e, JobStarted):
            started.setdefault(e.attempt, e)
            if e.attempt not in dispatched:
                bad.append(f"{job_id}: attempt {e.attempt} started but never dispatched")
        elif isinstance(e, JobEnded):
            check.last_attempt.setdefault(job_id, {})["JobEnded"] = d
            dd = dispatched.get(e.attempt)
            if dd is None:
                if e.state != "CANCELLED" or e.gpu_seconds_run or e.gpu_seconds_startup:
                    bad.append(f"{job_id}: attempt {e.attempt} ended {e.state} undispatched")
            else:
                if (e.node, sorted(e.gpus)) != (dd.node, sorted(dd.gpus)) or e.tier != dd.tier:
                    bad.append(
                        f"{job_id}: ended on {e.node}{e.gpus}, dispatched {dd.node}{dd.gpus}"
                    )
                _check_held(job_id, e, dd, check)
            if e.state == "FAILED" and e.oom:
                oom_end, final_end_at = e, i
            else:
                oom_end, final_end_at = None, i
        elif isinstance(e, JobRetryScheduled | JobRetryDeclined):
            retry = isinstance(e, JobRetryScheduled)
            if oom_end is None or e.attempt != oom_end.attempt + (1 if retry else 0):
                bad.append(f"{job_id}: {type(e).__name__} (attempt {e.attempt}) without an OOM end")
            elif isinstance(e, JobRetryScheduled):
                check.stats["oom_retries"] += 1
                attempt, min_vram, final_end_at = e.attempt, e.min_vram_gb, None
                end_tier = tiers.get(oom_end.tier or "")
                if end_tier is not None and e.min_vram_gb <= end_tier.vram_gb:
                    bad.append(
                        f"{job_id}: retry asks {e.min_vram_gb} GB after OOM on {end_tier.name}"
                    )
            else:
                check.stats["oom_declined"] += 1
            oom_end = None
        elif isinstance(e, JobCancelRequested):
            check.stats["cancel_requests"] += 1
    check.last_attempt.setdefault(job_id, {})
    if attempt in dispatched:
        check.last_attempt[job_id]["JobDispatched"] = next(
            d
            for d in events
            if isinstance(d.event, JobDispatched)
            and d.event.attempt == attempt
            and d.seq in check.applied_dispatches
        )
    if attempt in started:
        check.last_attempt[job_id]["JobStarted"] = next(
            d for d in events if isinstance(d.event, JobStarted) and d.event.attempt == attempt
        )
    job = check.state.jobs.get(job_id)
    if job is None or job.state not in TERMINAL or job.oom_pending or final_end_at is None:
        state = "unknown" if job is None else job.state + (" (OOM undecided)" * job.oom_pending)
        bad.append(f"{job_id}: not in exactly one terminal state in the log: {state} (S2, O5)")


def _check_held(job_id: str, e: JobEnded, d: JobDispatched, check: LogCheck) -> None:
    """F5: the GPU-seconds charged for the run lie between dispatch and the end's append."""
    n = len(d.gpus) or 1
    held_s = (e.gpu_seconds_startup + e.gpu_seconds_run) / n
    if held_s < 0 or held_s > e.ts - d.ts + HELD_SLACK_S:
        check.violations.append(
            f"{job_id}: attempt {e.attempt} charged {held_s:.3f} s held per GPU, but it ended "
            f"{e.ts - d.ts:.3f} s after its dispatch (F5)"
        )
    if not e.gpu_seconds_reserved and not close(
        e.usage, (e.gpu_seconds_startup + e.gpu_seconds_run) * e.tflops
    ):
        check.violations.append(f"{job_id}: JobEnded.usage {e.usage} != held GPU-s × TFLOPS (F1)")


def _check_gpus(log: Sequence[Delivered], check: LogCheck) -> None:
    """Replay who holds each GPU (a dispatched attempt or a reservation): never two at once."""
    holder: dict[tuple[str, str, int], str] = {}

    def take(key: tuple[str, str, int], who: str, own: str, seq: int) -> None:
        h = holder.get(key)
        if h is not None and h not in (who, own):
            check.violations.append(f"GPU {key} given to {who} at seq {seq} while {h} holds it")
        holder[key] = who

    for d in log:
        e = d.event
        if isinstance(e, ReservationStarted | ReservationGrown):
            res = f"reservation:{e.job_id}"
            if isinstance(e, ReservationStarted):
                check.stats["reservations"] += 1
            for key in [k for k, h in holder.items() if h == res and k[2] not in e.gpus]:
                del holder[key]  # R5: a reserved GPU that went down left the reservation
            for g in e.gpus:
                take((e.node, e.tier, g), res, res, d.seq)
        elif isinstance(e, ReservationShrunk):  # R5: lost GPUs leave, the rest is kept
            for g in e.removed:
                if holder.get((e.node, e.tier, g)) == f"reservation:{e.job_id}":
                    del holder[(e.node, e.tier, g)]
        elif isinstance(e, ReservationReleased):
            check.stats[f"reservation_released:{e.reason}"] += 1
            for g in e.gpus:
                if holder.get((e.node, e.tier, g)) == f"reservation:{e.job_id}":
                    del holder[(e.node, e.tier, g)]
        elif isinstance(e, JobDispatched) and d.seq in check.applied_dispatches:
            for g in e.gpus:
                take((e.node, e.tier, g), f"job:{e.job_id}", f"reservation:{e.job_id}", d.seq)
        elif isinstance(e, JobEnded):
            mine = (f"job:{e.job_id}", f"reservation:{e.job_id}")
            for key in [k for k, h in holder.items() if h in mine]:
                del holder[key]
        elif isinstance(e, BackfillStarted):
            check.stats["backfill_started"] += 1
        elif isinstance(e, BackfillEnded):
            check.stats[f"backfill_ended:{e.reason}"] += 1
    if holder:
        check.violations.append(f"GPUs still held after every job ended: {sorted(holder.items())}")


def _check_charges(log: Sequence[Delivered], check: LogCheck, half_life_s: float) -> None:
    """F4/F5: each charge the log owes lands once, with its amount, on its lab; and every lab's
    usage chain is F3 applied to its charges in log order."""
    labs: dict[str, str] = {}
    usage: dict[str, tuple[float, float]] = {}  # lab -> (value, as_of)
    bad = check.violations
    for d in log:
        e = d.event
        if isinstance(e, JobSubmitted):
            labs.update((task.job_id, e.lab) for task in tasks_of(e) if task.job_id not in labs)
        elif isinstance(e, JobEnded) and end_amount(e) > 0 and e.job_id in labs:
            cid = f"chg-{e.event_id}"
            check.owed[cid] = Charge(
                cid, labs[e.job_id], end_amount(e), e.job_id, "JobEnded", d.seq
            )
        elif isinstance(e, ReservationReleased) and e.charged_now and e.job_id in labs:
            amount = e.gpu_seconds * e.tflops
            if amount > 0:
                cid = f"chg-{e.event_id}"
                check.owed[cid] = Charge(cid, labs[e.job_id], amount, e.job_id, "RR", d.seq)
        elif isinstance(e, UsageCharged):
            check.charged.setdefault(e.event_id, []).append(e)
            value, as_of = usage.get(e.lab, (0.0, 0.0))
            at = max(e.as_of, as_of)
            decay = 0.5 ** ((at - as_of) / half_life_s) if e.lab in usage else 0.0
            expected = value * decay + e.amount
            if e.as_of < as_of - 1e-9 or not close(e.value_after, expected):
                bad.append(
                    f"lab {e.lab}: UsageCharged seq {d.seq} value_after {e.value_after} as_of "
                    f"{e.as_of}, F3 from the previous ({value}, {as_of}) gives {expected}"
                )
            usage[e.lab] = (e.value_after, e.as_of)
            if e.job_id is not None:
                check.charged_by_job[e.job_id] = check.charged_by_job.get(e.job_id, 0.0) + e.amount
    per_lab_owed: dict[str, float] = defaultdict(float)
    per_lab_charged: dict[str, float] = defaultdict(float)
    for cid, c in check.owed.items():
        per_lab_owed[c.lab] += c.amount
        got = check.charged.get(cid, [])
        if len(got) != 1:
            bad.append(
                f"{c.job_id}: charge {cid} ({c.source}, seq {c.seq}) landed {len(got)} times"
            )
        elif got[0].lab != c.lab or not close(got[0].amount, c.amount) or got[0].job_id != c.job_id:
            u = got[0]
            bad.append(
                f"{cid}: charged {u.amount} to {u.lab}/{u.job_id}, owed {c.amount} to {c.lab}"
            )
    for cid, events in check.charged.items():
        for u in events:
            if u.job_id is None:
                continue
            per_lab_charged[u.lab] += u.amount
            if cid not in check.owed:
                bad.append(f"UsageCharged {cid} ({u.amount} to {u.lab}) has no source event")
    for lab in sorted(set(per_lab_owed) | set(per_lab_charged)):
        if not close(per_lab_owed[lab], per_lab_charged[lab]):
            bad.append(
                f"lab {lab}: the log owes {per_lab_owed[lab]:.6f} TFLOP-s, UsageCharged sum to "
                f"{per_lab_charged[lab]:.6f} (F5)"
            )
    check.stats["charges"] = len(check.owed)
    for lab, (value, as_of) in usage.items():
        folded = check.state.usage.get(lab)
        if folded is None or not close(folded.value, value) or folded.as_of != as_of:
            bad.append(f"lab {lab}: the fold's usage {folded}, the chain's ({value}, {as_of})")


# --- the API against the log -------------------------------------------------------------------


def compare_api(
    check: LogCheck,
    api_jobs: Mapping[str, Mapping[str, Any] | None],
    api_labs: Mapping[str, Mapping[str, Any]],
    accepted: Iterable[str],
) -> list[str]:
    """The REST API's rows (GET /v1/jobs/{id}: None when 404; GET /v1/labs) against the log's
    fold: every accepted job visible, terminal, with the log's state, attempt, placement, start,
    isolation and charge; every lab's stored usage the log's (SPEC E3, O5)."""
    bad: list[str] = []
    accepted = set(accepted)
    for job_id in sorted(accepted - set(check.state.jobs)):
        bad.append(f"{job_id}: accepted by the API (201/200) but not in the log")
    for job_id in sorted(set(check.state.jobs) - accepted):
        bad.append(f"{job_id}: in the log but no client was told it was accepted")
    for job_id, job in sorted(check.state.jobs.items()):
        row = api_jobs.get(job_id)
        if row is None:
            bad.append(f"{job_id}: in the log ({job.state}) but GET /v1/jobs/{job_id} is 404 (O5)")
            continue
        if (row["state"], row["attempt"]) != (job.state, job.attempt):
            bad.append(
                f"{job_id}: API says {row['state']} attempt {row['attempt']}, the log "
                f"{job.state} attempt {job.attempt}"
            )
        if row["state"] not in TERMINAL or row.get("terminal") is False:
            bad.append(f"{job_id}: not terminal in the API: {row['state']}")
        last = check.last_attempt.get(job_id, {})
        d, s, e = last.get("JobDispatched"), last.get("JobStarted"), last.get("JobEnded")
        if d is not None:
            assert isinstance(d.event, JobDispatched)
            where = row.get("placement") or {}
            if (where.get("node"), sorted(where.get("gpus") or [])) != (
                d.event.node,
                sorted(d.event.gpus),
            ):
                bad.append(f"{job_id}: API placement {where}, the log {d.event.node}{d.event.gpus}")
        if s is not None:
            assert isinstance(s.event, JobStarted)
            if row.get("started_at") is None or row.get("isolation") != s.event.isolation:
                bad.append(
                    f"{job_id}: API started_at={row.get('started_at')} isolation="
                    f"{row.get('isolation')}, the log started it ({s.event.isolation})"
                )
        if e is not None:
            assert isinstance(e.event, JobEnded)
            if row.get("exit_code") != e.event.exit_code:
                bad.append(
                    f"{job_id}: exit_code: API {row.get('exit_code')}, log {e.event.exit_code}"
                )
        charged = check.charged_by_job.get(job_id, 0.0)
        if not close(float(row.get("usage_charged") or 0.0), charged):
            bad.append(f"{job_id}: API usage_charged {row.get('usage_charged')}, log {charged}")
    for lab, usage in sorted(check.state.usage.items()):
        api = api_labs.get(lab)
        if api is None:
            bad.append(f"lab {lab}: has usage in the log but not in GET /v1/labs")
        elif (
            not close(float(api["raw_value"]), usage.value)
            or abs(float(api["as_of"] or 0.0) - usage.as_of) > 1e-6
        ):
            bad.append(
                f"lab {lab}: API raw_value {api['raw_value']} as_of {api['as_of']}, the log "
                f"{usage.value} as_of {usage.as_of}"
            )
    return bad

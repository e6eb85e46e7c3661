"""Jobs for people (SPEC U1): the queue like squeue, history like sacct, one job like
`scontrol show job` with its attempts and the OOM retry in a sentence (X8). Pure."""

from __future__ import annotations

from typing import Any

from jpu.cli.arrays_view import group, ranges
from jpu.cli.rest.render import fields, fmt_duration, fmt_ts, fmt_usage, table
from jpu.domain.arrays import split_task_id
from jpu.domain.dependencies import NEVER_SATISFIED

_QUEUE_HEADERS = ["RANK", "JOBID", "NAME", "LAB", "USER", "GPUS", "TIERS", "STATE", "TIME"]


def _where(e: dict[str, Any]) -> str:
    """squeue's NODELIST(REASON): the node and GPUs of a running job, else (reason)."""
    p = e.get("placement")
    if p:
        return f"{p['node']}[{p['tier']}:{','.join(str(g) for g in p.get('gpus', []))}]"
    return f"({reason(e)})"


def reason(e: dict[str, Any]) -> str:
    """The D7 reason; MinVram with the VRAM floor it waits for (`MinVram>=13GB`, X8)."""
    r = e.get("pending_reason") or "None"
    if r == "MinVram" and e.get("min_vram_gb") is not None:
        return f"{r}>={e['min_vram_gb']}GB"
    return r


def state_text(j: dict[str, Any]) -> str:
    """The state, and why when a job was ended without running for a reason of its own:
    `CANCELLED(DependencyNeverSatisfied)` (Q8; Slurm's reason for it), not a bare CANCELLED."""
    state = str(j.get("state"))
    if state == "CANCELLED" and j.get("reason") == NEVER_SATISFIED:
        return f"{state}(DependencyNeverSatisfied)"
    return state


def never_met(jobs: list[dict[str, Any]]) -> str:
    """`jpu queue`'s footer for jobs that left the queue at once (Q8): which, and why."""
    rows = [[j["id"], j.get("name"), state_text(j), fmt_ts(j.get("ended_at"))] for j in jobs]
    head = "Left the queue in the last hour: a job they depend on ended so that their "
    head += "dependency can never be met (Q8; `jpu why ID` names it)"
    return head + "\n" + table(["JOBID", "NAME", "STATE", "ENDED"], rows)


def estimate(j: dict[str, Any]) -> str:
    """SPEC U4 in words: an estimate with its basis and when it was computed, never a promise;
    with no start, why (`estimate_reason`)."""
    start, basis = j.get("estimated_start"), j.get("estimate_basis")
    at = f", computed {fmt_ts(j['estimated_at'])}" if j.get("estimated_at") else ""
    if start is None:
        why = j.get("estimate_reason")
        return f"unknown: {why} (estimate{at})" if why else f"unknown (estimate{at})"
    return f"{fmt_ts(start)} (estimate from {basis}{at})"


def queue(data: dict[str, Any], start: bool = False) -> str:
    """The global queue by rank, the personal queues, then the jobs running now (like squeue:
    STATE, TIME = run time, NODELIST(REASON)). `start`: an ESTIMATED_START column (U4; "-" for
    a job no estimate has covered yet)."""
    rows = []
    entries = [*data.get("queue", []), *data.get("running", [])]
    # Q7: an array's tasks still in the personal queue as one row (ranked and running ones
    # keep their own rows, with their rank and node)
    for e in group(entries, "job_id", keep=lambda e: e.get("state") == "PERSONAL_QUEUE_WAIT"):
        row = [
            e.get("rank") or "-",
            e["job_id"],
            e.get("name"),
            e.get("lab"),
            e.get("user"),
            e.get("num_gpus"),
            e.get("tiers") or "any",
            e.get("state"),
            fmt_duration(e.get("elapsed_s")),
        ]
        if start:  # U4: "unknown" when the estimate found no start
            at = e.get("estimated_start")
            unknown = at is None and e.get("estimate_basis")
            row.append("unknown" if unknown else fmt_ts(at))
        usage = [fmt_usage(e.get("lab_usage")), fmt_usage(e.get("lab_accrued_uncharged"))]
        rows.append([*row, *usage, _where(e)])
    headers = [*_QUEUE_HEADERS, *(["ESTIMATED_START"] if start else [])]
    # F4: the charged usage orders the queue (D1); what the lab's running jobs and reservations
    # have cost so far is charged only when they end — two columns, never one sum
    usage = ["LAB_USAGE(CHARGED)", "ACCRUED(UNCHARGED)"]
    out = table([*headers, *usage, "NODELIST(REASON)"], rows)
    if start:
        out += _unknown_starts(data.get("queue", []))
    state = data.get("maintenance", "NORMAL")
    if state != "NORMAL":
        out = f"Maintenance: {state} (nothing is dispatched)\n{out}"
    return out


def _unknown_starts(entries: list[dict[str, Any]]) -> str:
    """Under the table, why each "unknown" start is unknown (U4), one line per reason."""
    by_why: dict[str, list[str]] = {}
    for e in entries:
        if e.get("estimated_start") is None and e.get("estimate_basis"):
            by_why.setdefault(e.get("estimate_reason") or "no start found", []).append(e["job_id"])
    lines = [f"unknown start of {', '.join(ids)}: {why}" for why, ids in by_why.items()]
    return "".join(f"\n{line}" for line in lines)


def jobs(data: dict[str, Any]) -> str:
    """History like sacct: state, exit code, attempts, GPU-hours, usage charged, elapsed."""
    rows = []
    for j in group(data.get("jobs", []), "id"):  # Q7: an array's tasks as one row
        p = j.get("placement") or {}
        gpu_s = j.get("gpu_seconds")
        rows.append(
            [
                j["id"],
                j.get("name"),
                j.get("user"),
                j.get("lab"),
                state_text(j),
                j.get("exit_code"),
                j.get("attempt"),
                j.get("num_gpus"),
                p.get("tier"),
                fmt_ts(j.get("submitted_at")),
                fmt_duration(j.get("elapsed_s")),
                "-" if gpu_s is None else f"{gpu_s / 3600:.3f}",
                fmt_usage(j.get("usage_charged")),
            ]
        )
    headers = ["JOBID", "NAME", "USER", "LAB", "STATE", "EXITCODE", "ATTEMPTS", "GPUS", "TIER"]
    out = table([*headers, "SUBMITTED", "ELAPSED", "GPU_HOURS", "USAGE"], rows)
    if data.get("next_cursor"):
        out += "\n(more jobs: --all for every page, or --limit N)"
    return out + "\n(USAGE in TFLOP-s charged to the lab, F1)"


def _placement(job: dict[str, Any]) -> str | None:
    p = job.get("placement")
    if not p:
        return None
    return f"{p['node']} {p['tier']} gpus={','.join(str(g) for g in p.get('gpus', []))}"


def _reservation(job: dict[str, Any]) -> str | None:
    r = job.get("reservation")
    if not r:
        return None
    gpus = ",".join(str(g) for g in r.get("gpus", []))
    return f"{r['node']} {r['tier']} gpus={gpus} since {fmt_ts(r.get('since'))}"


def _run_time(j: dict[str, Any]) -> str | None:
    if "elapsed_s" in j:  # the gateway's clock: live while it runs (SPEC U5)
        return None if j["elapsed_s"] is None else fmt_duration(j["elapsed_s"])
    if j.get("started_at") is None:
        return None
    return fmt_duration((j.get("ended_at") or j["started_at"]) - j["started_at"])


def _min_vram(j: dict[str, Any]) -> Any:
    """X8 raises min_vram_gb after an OOM: say so, never show it as the user's."""
    got, asked = j.get("min_vram_gb"), j.get("min_vram_gb_requested", j.get("min_vram_gb"))
    if got is None or got == asked:
        return got
    you = f"you asked for {asked}" if asked is not None else "you set none"
    return f"{got} (raised by the OOM retry; {you})"


def _attempt(j: dict[str, Any], attempts: list[dict[str, Any]]) -> Any:
    """`2 of at most 3` once an OOM retry is in play (X8: max_attempts), else the number."""
    attempt, most = j.get("attempt"), j.get("max_attempts")
    retried = (attempt or 1) > 1 or any(a.get("oom") for a in attempts)
    return f"{attempt} of at most {most}" if most and retried else attempt


def array(a: dict[str, Any]) -> str:
    """Q7: an array as `jpu show ID` prints it: its tasks and how many are in each state."""
    indices = [k for t in a.get("tasks", []) if (k := split_task_id(t)) is not None]
    states = a.get("states") or {}
    return fields(
        [
            ("ArrayJobId", a["id"]),
            ("Name", a.get("name")),
            ("User", f"{a.get('user')} (lab {a.get('lab')})"),
            ("GPUs", a.get("num_gpus")),
            ("Tasks", f"{len(indices)}: {a['id']}_[{ranges(i for _, i in indices)}]"),
            ("States", ",".join(f"{s}:{n}" for s, n in states.items())),
            ("UsageCharged", fmt_usage(a.get("usage_charged"))),
        ]
    )


def job(j: dict[str, Any]) -> str:
    if j.get("tasks") is not None:  # the id of an array (Q7)
        return array(j)
    attempts = j.get("attempts") or []
    latest = attempts[-1] if attempts else j  # the latest attempt's end, not an earlier one's
    pairs: list[tuple[str, Any]] = [
        ("JobId", j["id"]),
        ("Name", j.get("name")),
        ("User", f"{j.get('user')} (lab {j.get('lab')})"),
        ("State", j.get("state")),
        ("Attempt", _attempt(j, attempts)),
        ("GPUs", j.get("num_gpus")),
        ("Tiers", j.get("tiers") or "any"),
        ("MinVramGB", _min_vram(j)),
        ("TimeLimit", fmt_duration(j.get("time_limit_s"))),
        ("Submitted", fmt_ts(j.get("submitted_at"))),
    ]
    if j.get("array_id"):  # Q7: a task of an array
        pairs += [("ArrayJobId", j["array_id"]), ("ArrayTaskId", j.get("array_task"))]
    if j.get("rank") is not None or j.get("pending_reason"):
        pairs += [("Rank", j.get("rank")), ("Reason", reason(j))]
    if j.get("dependency"):
        pairs.append(("Dependency", j["dependency"]))  # Q8, Slurm syntax
    if j.get("held"):
        pairs.append(("Held", True))  # Q9: `jpu release ID`
    if j.get("estimate_basis") or j.get("estimate_reason"):  # U4 (reason: not estimated yet)
        pairs.append(("EstimatedStart", estimate(j)))
    pairs += [
        ("Reservation", _reservation(j)),
        ("Placement", _placement(j)),
        ("Started", fmt_ts(j.get("started_at"))),
        ("Ended", fmt_ts(j.get("ended_at"))),
        ("RunTime", _run_time(j)),
        ("WorkDir", j.get("workdir")),  # U5: where it runs (its chdir, else JOB_OUTPUT_DIR)
        ("Account", j.get("account")),  # X4: the Unix account it runs as
        ("OutputDir", j.get("output_dir")),  # X2: stdout/stderr there (`jpu logs ID`)
        ("BackendJobId", j.get("backend_job_id")),
        ("Isolation", j.get("isolation")),
        ("Workspace", j.get("workspace") or "-"),  # X4a: the image it runs in (-: the base)
        ("ExitCode", latest.get("exit_code")),
        ("EndReason", latest.get("reason")),
        ("UsageCharged", fmt_usage(j.get("usage_charged"))),
    ]
    if latest.get("oom"):
        pairs.append(("GpuOOM", True))
    if j.get("kill_failed"):
        pairs.append(("KillFailed", True))
    if j.get("cancel_requested_by"):
        pairs.append(("CancelledBy", j["cancel_requested_by"]))
    for key, value in (j.get("sbatch") or {}).items():  # U6: -o/-e/--open-mode/--signal
        pairs.append(
            (
                {"output": "StdOut", "error": "StdErr", "open_mode": "OpenMode"}.get(
                    key, key.title()
                ),
                value,
            )
        )
    pairs += [("Warning", w) for w in j.get("sbatch_warnings") or []]  # U6, as at submit
    if j.get("degraded"):  # SPEC O5: the database is away, the job as the log says
        pairs.append(("Note", j["degraded"]))
    out = fields(pairs)
    for sentence in j.get("oom_explanation") or []:
        out += f"\nOOM retry: {sentence}."
    if len(attempts) > 1 or any(a.get("oom") or a.get("host_oom") for a in attempts):
        out += "\n--- attempts ---\n" + _attempts(attempts)
    if j.get("command") is not None:
        out += "\n--- command ---\n" + str(j["command"]).rstrip("\n")
    return out


def _attempts(attempts: list[dict[str, Any]]) -> str:
    rows = [
        [
            a.get("attempt"),
            a.get("state"),
            a.get("tier"),
            f"{a['vram_gb']} GB" if a.get("vram_gb") else None,
            a.get("node"),
            a.get("gpus"),
            a.get("exit_code"),
            a.get("reason"),
            fmt_duration(a.get("run_s")),
            a.get("output_dir"),
        ]
        for a in attempts
    ]
    headers = ["ATTEMPT", "STATE", "TIER", "VRAM", "NODE", "GPUS", "EXIT", "REASON", "RUNTIME"]
    return table([*headers, "OUTPUT (jpu logs ID --attempt N)"], rows)

"""Submit and cancel, decided on the intake's fold (SPEC Q1–Q4, Q6; cancel: §8, S2). Pure: the
job id, the event id and `now` are passed in; jpu_services.intake.submit reads and appends.

A submit is refused in this order: U5/SEC1 its `chdir` (`chdir_answer`, on the facts intake's edge
gathered as the job's account would see them), X4a its workspace (`with_workspace`: the user's
default when it names none, READY on the fold), U6 its sbatch options (`with_sbatch`: the one
place that decides them, for the CLI and any other client alike), Q1 validation (`checked`),
then (with an Idempotency-Key) Q6 replay of the job the key made, then Q3 maintenance, then Q8
parents of another lab, then Q2 no-fit; else it is `JobSubmitted` (Q4).

The dependency (Q8) is text on the wire (`afterok:12:13,afterany:14`): `checked` reads it once
into a `Submit`, and every decision after it, and the event's normalised text, use that struct.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from jpu.commands import CancelCommand, CommandReply, HoldCommand, SubmitCommand, error_reply
from jpu.config import Tier
from jpu.domain import arrays, dependencies, limits
from jpu.domain.cluster import ClusterState, parent_facts
from jpu.domain.holdings import gpus
from jpu.domain.states import JobView, request_digest
from jpu.domain.validation import validate_submit
from jpu.domain.workspaces import lookup_ids, usable_problem, with_default
from jpu.events import JobCancelRequested, JobEnded, JobHeld, JobReleased, JobSubmitted
from jpu.policy import mail, maintenance
from jpu.policy import sbatch as sbatch_policy
from jpu.policy.placements import ever_fits
from jpu.policy.queue import largest_placement
from jpu.policy.workdir import NOT_ON_CLUSTER, Access, chdir_problem


class _Want(msgspec.Struct, frozen=True):
    num_gpus: int
    tiers: frozenset[str] | None
    min_vram_gb: int | None


def idempotent_job_id(user: str, key: str) -> str:
    """Q6: the same key from the same user always names the same job."""
    return hashlib.sha256(f"{user}\x00{key}".encode()).hexdigest()[:24]


def field_refused(field: str, message: str, **details: Any) -> CommandReply:
    """422 VALIDATION_ERROR naming `field` (details.field, and the message's first word)."""
    text = message if message.startswith(field) else f"{field}: {message}"
    return error_reply("VALIDATION_ERROR", text, {"field": field, **details})


def chdir_to_check(cmd: SubmitCommand) -> str | None:
    """The `chdir` whose directories intake's edge must look at (U5, SEC1); None when absent,
    or malformed (then Q1 refuses it in its own words)."""
    chdir = cmd.body.get("chdir")
    return chdir if isinstance(chdir, str) and chdir_problem(chdir) is None else None


def chdir_answer(
    chdir: str,
    unseen: str | None,
    outside: str | None,
    account: str,
    can: Access | None,
    roots: Sequence[str],
) -> tuple[CommandReply | None, list[dict[str, Any]]]:
    """U5 at submit, from what the edge saw: a `chdir` that does not exist where jobs run
    (`unseen`, jpu.policy.workdir.not_on_cluster_problem) is refused before a GPU is held,
    with `reason: not_on_cluster` (the CLI then falls back to no chdir when the folder was only
    its default); SEC1, a `chdir` outside the site's roots (`outside`,
    jpu.policy.workdir.outside_roots_problem), is refused whoever the account is; then one the
    job's `account` cannot enter is refused (422 naming `chdir`, the account and the fix); one
    it cannot write is accepted with a warning saying so. `can` None: not decidable here (the
    node decides at launch)."""
    if unseen is not None:
        return field_refused("chdir", unseen, chdir=chdir, reason=NOT_ON_CLUSTER), []
    if outside is not None:
        return field_refused("chdir", outside, chdir=chdir, workdir_roots=list(roots)), []
    if can is None or can.write:
        return None, []
    if not can.enter:
        return field_refused("chdir", can.message, account=account, chdir=chdir), []
    return None, [{"field": "chdir", "account": account, "message": f"chdir: {can.message}"}]


def with_workspace(
    cmd: SubmitCommand, state: ClusterState
) -> tuple[SubmitCommand, str | None, CommandReply | None]:
    """X4a on the fold (never a projection that may lag the log): a job naming no workspace
    runs in its user's default (jpu.domain.workspaces.with_default); the one it names — own,
    else the lab's — must exist, be the user's to use and be READY, else 422 naming
    `workspace` (nothing appended). The command as decided, and the image of that workspace.
    A malformed name is left to Q1 (`checked`)."""
    body = with_default(cmd.body, state.default_workspace.get(cmd.user))
    if body is not cmd.body:
        cmd = msgspec.structs.replace(cmd, body=body)
    name = body.get("workspace")
    if not isinstance(name, str) or limits.workspace_name_problem(name):
        return cmd, None, None
    found = (state.workspaces.get(i) for i in lookup_ids(name, cmd.user, cmd.lab))
    ws = next((w for w in found if w is not None), None)
    problem = usable_problem(ws, name, cmd.user, cmd.lab)
    if problem is not None:
        return cmd, None, field_refused("workspace", problem)
    assert ws is not None
    return cmd, ws.image, None


class Sbatch(msgspec.Struct, frozen=True):
    """U6 decided at intake: `notes` and `warnings` are answered in the 201 (`warnings`), the
    warnings kept on the job (JobSubmitted.sbatch_warnings); `refusal` a 422 naming the lines."""

    notes: list[str] = []
    warnings: list[str] = []
    refusal: CommandReply | None = None

    def said(self) -> list[dict[str, Any]]:
        return [{"field": "sbatch", "message": m} for m in (*self.notes, *self.warnings)]


def with_sbatch(cmd: SubmitCommand, site: sbatch_policy.Site) -> tuple[SubmitCommand, Sbatch]:
    """SPEC U6 for every submit: the raw sbatch options the body carries (`sbatch`: the user's
    options with the line each came from) read by the one table and decided by
    jpu.policy.sbatch on this site's tiers and settings: the tiers they admit, `-o/-e`,
    `--open-mode`, `--signal` and `--export`'s variables become the job's fields (the body's own
    `env` wins over --export's, as the command line wins over the script); the second class
    warns (or, under `sbatch_compat: strict`, is refused with the rest: 422 naming `sbatch`,
    every line); Q10's no-SMTP warning for `mail_user`. The command comes back without
    `sbatch` (it is decided); a malformed one is refused naming `sbatch` (Q1's bounds)."""
    body = dict(cmd.body)
    given = body.pop("sbatch", None)
    if given is not None and (why := limits.sbatch_problem(given)):
        return cmd, Sbatch(refusal=field_refused("sbatch", why))
    options = [(o["option"], o.get("value"), _line(o)) for o in (given or {}).get("options") or []]
    source = (given or {}).get("source") or "request"
    read = sbatch_policy.read_options(options)
    decision = sbatch_policy.Decision(problems=read.problems)
    named = body.get("tiers")
    known = {t.name for t in site.tiers}
    # an unknown tier name is Q1's to refuse (it names the valid ones): nothing narrowed here
    plain = not isinstance(named, list) or not set(map(str, named)) <= known
    if given is not None and not read.problems:
        gpus = body.get("num_gpus")
        # the named `tiers` win over a GPU type (the command line's --tier over the script's)
        types = read.types if named is None else [] if plain else list(named)
        decision = sbatch_policy.decide(
            read.raw, gpus if isinstance(gpus, int) and gpus > 0 else 1, types,
            read.raw.get("gpus_count", ("", f"{source}: --tier"))[1], site, read.warnings,
        )  # fmt: skip
    mail_user = body.get("mail_user")
    if isinstance(mail_user, str):  # Q10: the line that named it, else the field
        where = read.raw.get("mail_user", ("", f"mail_user={mail_user}"))[1]
        if (unsent := sbatch_policy.unsent_mail(site, mail_user, where)) is not None:
            decision.warnings.append(unsent)
    if decision.problems:
        problems = decision.problems[: limits.MAX_PROBLEMS]
        reply = error_reply(
            "VALIDATION_ERROR", "\n".join(problems), {"field": "sbatch", "problems": problems}
        )
        return cmd, Sbatch(refusal=reply)
    if decision.tiers is not None and not (plain and named is not None):
        body["tiers"] = decision.tiers
    for key in ("output", "error", "open_mode", "signal"):  # U6: executed by the backends
        if getattr(decision, key) is not None:
            body[key] = getattr(decision, key)
    if decision.env:
        own = body.get("env")
        body["env"] = {**decision.env, **(own if isinstance(own, dict) else {})}
    decided = Sbatch(notes=decision.notes, warnings=decision.warnings)
    return msgspec.structs.replace(cmd, body=body), decided


def _line(option: Mapping[str, Any]) -> str:
    """Where the user wrote an option; a client that does not say: the option as written."""
    line = option.get("source_line")
    if line:
        return str(line)
    value = option.get("value")
    return f"sbatch {option['option']}" + ("" if value is None else f"={value}")


class Submit(msgspec.Struct, frozen=True):
    """A submit Q1 accepted (`checked`): the command, and its dependency (Q8) read from the
    body's text once, for every decision after it and for the event."""

    cmd: SubmitCommand
    dependency: dependencies.Dependency


def checked(cmd: SubmitCommand, tiers: Mapping[str, Tier]) -> Submit | CommandReply:
    """Q1: 422 naming each bad field; nothing reaches the log that a projection could not
    store (jpu.domain.limits). Accepted: the `Submit` the later decisions take."""
    problems = validate_submit(cmd.body, list(tiers))
    dependency, dependency_problems = _dependency(cmd.body)
    problems += dependency_problems
    key_problem = limits.idempotency_key_problem(cmd.idempotency_key)
    if key_problem:
        problems.append(limits.FieldError("Idempotency-Key", key_problem))
    if problems:
        return error_reply("VALIDATION_ERROR", *limits.error_details(problems))
    return Submit(cmd, dependency)


def _dependency(
    body: Mapping[str, Any],
) -> tuple[dependencies.Dependency, list[limits.FieldError]]:
    """Q8's syntax, read once, and Q9's flag; the parents themselves are checked on the fold
    (`refused`)."""
    dependency, out = dependencies.Dependency(), []
    if body.get("dependency") is not None:
        try:
            dependency = dependencies.parse(body["dependency"])
        except ValueError as e:
            out.append(limits.FieldError("dependency", str(e)))
    if body.get("hold") is not None and not isinstance(body["hold"], bool):
        out.append(limits.FieldError("hold", "must be true or false"))
    return dependency, out


def array_refused(
    cmd: SubmitCommand, state: ClusterState, max_tasks: int, max_queued: int
) -> CommandReply | None:
    """Q7: a 422 naming `array` when the value is malformed, has more than `max_tasks` tasks,
    or would bring the user's unfinished jobs above `max_queued`; None when acceptable (or
    when the submit is a single job)."""
    value = cmd.body.get("array")
    if value is None:
        return None
    try:
        tasks = len(arrays.parse(value, max_tasks).tasks)
    except arrays.ArrayProblem as e:
        problem = str(e)
    else:
        unfinished = len(state.personal.get(cmd.user, ())) + state.slots_of(cmd.user)
        if unfinished + tasks <= max_queued:
            return None
        problem = (
            f"{tasks} tasks would bring your unfinished jobs to {unfinished + tasks}; "
            f"at most {max_queued}"
        )
    return error_reply(
        "VALIDATION_ERROR", *limits.error_details([limits.FieldError("array", problem)])
    )


def submitted(
    submit: Submit,
    job_id: str,
    now: float,
    event_id: str,
    image: str | None = None,
    sbatch_warnings: Sequence[str] = (),
) -> JobSubmitted:
    """Q4: the accepted job, as the log records it; an array is this one event (Q7). `image`:
    the READY workspace's the body names (`with_workspace`); `sbatch_warnings`: U6's, as
    `with_sbatch` decided them (never the body's); the dependency as `checked` read it, in its
    normalised text."""
    cmd = submit.cmd
    b: Mapping[str, Any] = cmd.body
    limit = b.get("time_limit_s")
    array = b.get("array")
    return JobSubmitted(
        event_id=event_id,
        ts=now,
        job_id=job_id,
        lab=cmd.lab,
        user=cmd.user,
        name=b.get("name") or "job",
        command=b["command"],
        num_gpus=b["num_gpus"],
        tiers=list(b["tiers"]) if b.get("tiers") is not None else None,
        min_vram_gb=b.get("min_vram_gb"),
        time_limit_s=math.ceil(limit) if limit is not None else None,
        env=dict(b.get("env") or {}),
        idempotency_key=cmd.idempotency_key,
        chdir=b.get("chdir"),  # U5: validated (jpu.policy.workdir); None: JOB_OUTPUT_DIR
        # Q10: validated (jpu.policy.mail); None: the user's notification defaults
        mail_type=mail.parse_kinds(b["mail_type"])[0] if b.get("mail_type") is not None else None,
        mail_user=b.get("mail_user"),
        dependency=submit.dependency.text(),
        hold=bool(b.get("hold")),
        workspace=b.get("workspace"),  # X4a: checked READY on the fold (with_workspace)
        workspace_image=image if b.get("workspace") is not None else None,
        array=arrays.parse(array, arrays.MAX_INDEX + 1) if array is not None else None,
        output=b.get("output"),  # U6: checked by Q1 (jpu.domain.validation)
        error=b.get("error"),
        open_mode=b.get("open_mode"),
        signal=b.get("signal"),
        sbatch_warnings=list(sbatch_warnings),
    )


def replay(existing_digest: str, event: JobSubmitted, seq: int, state: str) -> CommandReply:
    """Q6: the key's job again (200), or 409 when this body differs from the first."""
    if existing_digest != request_digest(event):
        return error_reply(
            "IDEMPOTENCY_CONFLICT",
            "this Idempotency-Key was used with a different request body",
            {"job_id": event.job_id},
        )
    return CommandReply(status=200, job_id=event.job_id, seq=seq, replayed=True, state=state)


def refused(
    state: ClusterState, submit: Submit, event: JobSubmitted, tiers: Mapping[str, Tier]
) -> CommandReply | None:
    """Q3 (503 during maintenance), then Q8 (422 when a parent is not a known job of the lab),
    then Q2 (422 when no placement can ever run the job). `event`: `submitted(submit, ...)`."""
    if not maintenance.submit_allowed(state.maintenance.state):  # type: ignore[arg-type]
        return error_reply(
            "SERVICE_MAINTENANCE",
            "the cluster is in maintenance; submit later",
            {"state": state.maintenance.state, "message": state.maintenance.message},
        )
    dep = submit.dependency
    labs = {p: (f[0] if (f := parent_facts(state, p)) else None) for _, p in dep.conditions}
    problem = dependencies.foreign_lab(dep.conditions, labs, event.lab)
    if problem:  # Q8: only jobs of the same lab (another user's included)
        message, details = limits.error_details([limits.FieldError("dependency", problem)])
        return error_reply("VALIDATION_ERROR", message, details)
    want = _Want(event.num_gpus, frozenset(event.tiers) if event.tiers else None, event.min_vram_gb)
    pool = gpus(state)
    if ever_fits(want, pool, tiers):
        return None
    return error_reply(
        "NO_FIT_PLACEMENT",
        "no placement of the cluster can ever run this job",
        {
            "num_gpus": event.num_gpus,
            "tiers": event.tiers,
            "min_vram_gb": event.min_vram_gb,
            "largest_placement": largest_placement(want, pool, tiers),  # the fix
        },
    )


def _may_cancel(cmd: CancelCommand | HoldCommand, user: str, lab: str) -> bool:
    return cmd.by == user or cmd.role == "admin" or (cmd.role == "lab_admin" and cmd.lab == lab)


def cancel_answer(cmd: CancelCommand, job: JobView) -> CommandReply | None:
    """The answer to a cancel without appending anything (refused, or already cancelling);
    None: append `cancel_requested`."""
    if not _may_cancel(cmd, job.user, job.lab):
        return error_reply("FORBIDDEN", "only the owner, a lab_admin of its lab or an admin")
    if job.terminal and not job.oom_pending:  # S2; a pending OOM retry can still be called off
        return error_reply("ALREADY_TERMINAL", f"job already {job.state}", {"state": job.state})
    if job.state == "CANCELLING":
        return CommandReply(
            status=202, job_id=job.job_id, seq=job.last_seq, replayed=True, state=job.state
        )
    return None


def cancel_requested(job: JobView, by: str, now: float, event_id: str) -> JobCancelRequested:
    return JobCancelRequested(event_id=event_id, ts=now, job_id=job.job_id, by=by)


def hold_answer(cmd: HoldCommand, job: JobView) -> CommandReply | None:
    """Q9: refused (who may; only in the personal queue), or already so (answered, nothing
    appended); None: append `hold_event`."""
    if not _may_cancel(cmd, job.user, job.lab):  # the same people as for a cancel (§8)
        return error_reply("FORBIDDEN", "only the owner, a lab_admin of its lab or an admin")
    if job.state != "PERSONAL_QUEUE_WAIT":
        return error_reply(
            "NOT_IN_PERSONAL_QUEUE",
            f"job is {job.state}: only a job waiting in the personal queue can be "
            + ("held" if cmd.hold else "released"),
            {"state": job.state},
        )
    if job.held == cmd.hold:
        return CommandReply(
            status=200, job_id=job.job_id, seq=job.last_seq, replayed=True, state=job.state
        )
    return None


def hold_event(job: JobView, cmd: HoldCommand, now: float, event_id: str) -> JobHeld | JobReleased:
    cls = JobHeld if cmd.hold else JobReleased
    return cls(event_id=event_id, ts=now, job_id=job.job_id, by=cmd.by)


def never_satisfied_end(job: JobView, now: float, event_id: str) -> JobEnded:
    """Q8: a dependency that can never be met ends the job CANCELLED; it never ran, so it
    charges nothing (F4)."""
    return JobEnded(
        event_id=event_id,
        ts=now,
        job_id=job.job_id,
        attempt=job.attempt,
        state="CANCELLED",
        reason=dependencies.NEVER_SATISFIED,
    )

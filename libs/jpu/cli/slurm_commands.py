"""Slurm's command names over the REST API (SPEC U1, U6, U8): `jpu sbatch`, `jpu squeue`,
`jpu scancel`, `jpu sacct`, `jpu scontrol hold|release|show job`.

Thin: each reads what `jpu queue|jobs|show|cancel|hold|release` read (the same API calls, the
API's own id prefixes and array ids, U8) and prints it as Slurm does (jpu.cli.slurm_format).
`sbatch` is `jpu submit` itself under Slurm's name (one parser, one option table), saying
"Submitted batch job ID" as sbatch does, so `awk '{print $4}'` in a lab's scripts still works.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import time
from datetime import datetime
from typing import Any
from urllib.parse import quote

from jpu.cli import slurm_format, slurm_shims
from jpu.cli.rest import cancel, lists
from jpu.cli.rest.client import ApiError, RestClient, RestError, resolve_target
from jpu.cli.rest.subcommands import add_target_options
from jpu.domain.states import STATES, TERMINAL

USER_ERRORS: tuple[type[Exception], ...] = (RestError, ValueError, *slurm_shims.USER_ERRORS)
_EXTRA_STATES = {"RUNNING": "R", "COMPLETING": "CG", "COMPLETED": "CD", "CANCELLED": "CA",
                 "FAILED": "F", "PENDING": "PD"}  # fmt: skip


def register(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_target_options(common, defaults=False)
    _sbatch(sub)
    squeue = sub.add_parser(
        "squeue", parents=[common], help="queued and running jobs, as squeue", add_help=False
    )  # squeue's -h is --noheader; --help stays
    squeue.add_argument("--help", action="help", help="show this help message and exit")
    _squeue(squeue)
    _scancel(sub.add_parser("scancel", parents=[common], help="cancel jobs, as scancel"))
    _sacct(sub.add_parser("sacct", parents=[common], help="jobs and how they ended, as sacct"))
    _scontrol(sub.add_parser("scontrol", parents=[common], help="hold|release|show job"))
    slurm_shims.add_parser(sub)


def _client(args: argparse.Namespace) -> RestClient:
    return RestClient(resolve_target(args.url, args.token))


def split_ids(words: list[str]) -> list[str]:
    """`1a2,3b4 5c6` and `a13_[2-4,7]`: ids split on commas outside brackets (U8 ranges)."""
    return [i for w in words for i in re.split(r",(?![^\[]*\])", w) if i]


def matches(job_id: str, wanted: str) -> bool:
    """Whether `job_id` is one `wanted` names (U8): a prefix of it, or for a task of an array
    `PREFIX_K` or `PREFIX_[2-4,7]`."""
    if job_id.startswith(wanted):
        return True
    prefix, _, tasks = wanted.rpartition("_")
    array, _, index = job_id.rpartition("_")
    return bool(prefix and array) and array.startswith(prefix) and in_tasks(index, tasks)


def in_tasks(index: str, text: str) -> bool:
    """Whether task `index` is in `7` or `[2-4,7]` (False when `text` is neither)."""
    m = re.fullmatch(r"\[([\d,-]+)\]|(\d+)", text)
    if m is None or not index.isdigit():
        return False
    k = int(index)
    for part in (m[1] or m[2]).split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (hi or lo).isdigit() and int(lo) <= k <= int(hi or lo):
            return True
    return False


# --- sbatch ----------------------------------------------------------------------------------


def _sbatch(sub: Any) -> None:
    """`jpu sbatch` is the `submit` parser under a second name (as argparse's aliases are;
    `submit` may register the alias itself)."""
    parser = sub.choices["submit"]
    if "sbatch" not in sub.choices:
        sub._name_parser_map["sbatch"] = parser
        sub._choices_actions.append(
            sub._ChoicesPseudoAction("sbatch", (), "submit a job: `jpu submit` by sbatch's name")
        )
    submit = parser.get_default("func")

    def sbatch(args: argparse.Namespace) -> int:
        if args.command != "sbatch":
            return int(submit(args))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = int(submit(args))
        text = out.getvalue()
        for said in ("Submitted job ", "Submitted array job "):  # sbatch's words: scripts
            if text.startswith(said):  # read the id as the 4th word
                text = "Submitted batch job " + text.removeprefix(said)
        sys.stdout.write(text)
        return rc

    parser.set_defaults(func=sbatch)


# --- squeue ----------------------------------------------------------------------------------


def _squeue(p: argparse.ArgumentParser) -> None:
    p.add_argument("-u", "--user", metavar="USER[,USER]", help="only these users' jobs")
    p.add_argument("--me", action="store_true", help="only my jobs")
    p.add_argument("-j", "--jobs", metavar="IDS", help="only these jobs (ids or prefixes)")
    p.add_argument(
        "-t", "--states", "--state", metavar="S[,S]", help="PD, R, CG, PENDING, …, or all"
    )
    p.add_argument("-p", "--partition", metavar="P[,P]", help="only jobs on these tiers")
    p.add_argument("-A", "--account", metavar="LAB", help="only this lab's jobs")
    p.add_argument("-n", "--name", metavar="NAME[,NAME]", help="only jobs with these names")
    p.add_argument("-o", "--format", metavar="FMT", help="fields: %%.18i %%j %%u %%t %%M %%R …")
    p.add_argument("-l", "--long", action="store_true", help="squeue's long format")
    p.add_argument("-h", "--noheader", action="store_true", help="no header line")
    p.add_argument("-a", "--all", action="store_true", help="accepted (every job is shown)")
    p.add_argument("-r", "--array", action="store_true", help="accepted (one line per task)")
    p.set_defaults(func=cmd_squeue)


def _queue_states(text: str | None) -> list[str] | None:
    if not text or text.strip().upper() == "ALL":
        return None
    words = [_EXTRA_STATES.get(w.strip().upper(), w) for w in text.split(",")]
    return lists.parse_states(",".join(words))


def cmd_squeue(args: argparse.Namespace) -> int:
    fmt = args.format or (slurm_format.LONG_SQUEUE if args.long else slurm_format.DEFAULT_SQUEUE)
    fields = slurm_format.parse_format(fmt)  # a bad format fails before any call
    states = _queue_states(args.states)
    users = args.user.split(",") if args.user else None
    with _client(args) as c:
        if args.me:
            users = [c.get("/v1/me")["user"]]
        params = {"lab": args.account, "user": users[0] if users and len(users) == 1 else None}
        data = c.get("/v1/queue", {k: v for k, v in params.items() if v})
    jobs = [*data.get("running", []), *data.get("queue", [])]
    ids = split_ids([args.jobs]) if args.jobs else None
    parts = set(args.partition.split(",")) if args.partition else None
    names = set(args.name.split(",")) if args.name else None
    jobs = [
        j
        for j in jobs
        if (users is None or j.get("user") in users)
        and (states is None or j.get("state") in states)
        and (ids is None or any(matches(j["job_id"], i) for i in ids))
        and (names is None or j.get("name") in names)
        and (parts is None or _on_partition(j, parts))
    ]
    if args.json:
        print(json.dumps(jobs, indent=2, sort_keys=True))
        return 0
    now = time.time()
    lines = [] if args.noheader else [slurm_format.squeue_line(fields, None, now)]
    lines += [slurm_format.squeue_line(fields, j, now) for j in jobs]
    if lines:
        print("\n".join(lines))
    return 0


def _on_partition(job: dict[str, Any], parts: set[str]) -> bool:
    """A job on a tier, or that may run on one (no tier asked: any)."""
    placement = job.get("placement")
    if placement:
        return placement["tier"] in parts
    return not job.get("tiers") or bool(parts & set(job["tiers"]))


# --- scancel ---------------------------------------------------------------------------------


def _scancel(p: argparse.ArgumentParser) -> None:
    p.add_argument("job_ids", nargs="*", metavar="ID", help="job ids, prefixes, ARRAY_[2-4]")
    p.add_argument("-u", "--user", help="this user's jobs (default with filters: yours)")
    p.add_argument("--me", action="store_true", help="only my jobs")
    p.add_argument("-n", "--name", "--jobname", help="only jobs with this name")
    p.add_argument("-t", "--state", metavar="S[,S]", help="only jobs in these states")
    p.add_argument("-Q", "--quiet", action="store_true", help="no error on a job already ended")
    p.add_argument("-v", "--verbose", action="store_true", help="say what was cancelled")
    p.set_defaults(func=cmd_scancel)


def cmd_scancel(args: argparse.Namespace) -> int:
    """Silent on success, as scancel; one stderr line per job it could not cancel."""
    ids = split_ids(args.job_ids)
    filters = args.user or args.me or args.name or args.state
    if not ids and not filters:
        raise RestError("no job specification given: job ids, -u USER, --me, -n NAME or -t STATE")
    args.state = ",".join(_queue_states(args.state) or []) or None
    failed = 0
    with _client(args) as c:
        if filters:
            matching = cancel._filtered(c, args)
            ids = [i for i in matching if not ids or any(matches(i, w) for w in ids)]
        done = []
        for job_id in ids:
            try:
                done.append(c.post(f"/v1/jobs/{quote(job_id, safe='')}/cancel", {}))
            except ApiError as e:
                if args.quiet and e.code == "ALREADY_TERMINAL":
                    continue
                why = f"Kill job error on job id {job_id}: {e}"
                print(f"jpu scancel: error: {why}", file=sys.stderr)
                failed += 1
    if args.json:
        print(json.dumps(done, indent=2, sort_keys=True))
    elif args.verbose and done:
        print(cancel.cancelled(done))
    return 1 if failed else 0


# --- sacct -----------------------------------------------------------------------------------


def _sacct(p: argparse.ArgumentParser) -> None:
    p.add_argument("-j", "--jobs", metavar="IDS", help="these jobs (ids, prefixes, array ids)")
    p.add_argument("-u", "--user", help="this user's jobs")
    p.add_argument("-a", "--allusers", action="store_true", help="every job you may see")
    p.add_argument("-A", "--accounts", metavar="LAB", help="this lab's jobs")
    p.add_argument("-s", "--state", metavar="S[,S]", help="only these states (CD, F, CA, R, PD…)")
    p.add_argument("--name", metavar="NAME[,NAME]", help="only jobs with these names")
    p.add_argument("-S", "--starttime", metavar="WHEN", help="submitted at or after (midnight)")
    p.add_argument("-E", "--endtime", metavar="WHEN", help="submitted before (now)")
    p.add_argument("-o", "--format", metavar="F[,F]", help="JobID,JobName,State,ExitCode,…")
    p.add_argument("-b", "--brief", action="store_true", help="JobID,State,ExitCode")
    p.add_argument("-n", "--noheader", action="store_true", help="no header lines")
    p.add_argument("-P", "--parsable2", action="store_true", help="'|'-separated, no trailing '|'")
    p.add_argument("-p", "--parsable", action="store_true", help="'|'-separated, trailing '|'")
    p.add_argument("-X", "--allocations", action="store_true", help="accepted (no job steps here)")
    p.set_defaults(func=cmd_sacct)


def when(text: str | None, flag: str, default: float | None) -> float | None:
    """sacct's times: `now`, `today`/`midnight`, an ISO date or date-time (local)."""
    if text is None:
        return default
    word = text.strip().lower()
    if word == "now":
        return time.time()
    if word in ("today", "midnight"):
        return _midnight()
    return lists.parse_when(text, flag)


def _midnight() -> float:
    return datetime.now().replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def cmd_sacct(args: argparse.Namespace) -> int:
    fmt = "JobID,State,ExitCode" if args.brief else args.format or slurm_format.DEFAULT_SACCT
    slurm_format.parse_sacct_format(fmt)  # a bad field fails before any call
    states = lists.parse_states(",".join(_EXTRA_STATES.get(w.upper(), w) for w in
                                         (args.state or "").split(",") if w))  # fmt: skip
    failed = 0
    with _client(args) as c:
        if args.jobs:
            jobs, failed = _by_id(c, split_ids([args.jobs]), "sacct")
        else:
            jobs = _listed(c, args, states)
    names = set(args.name.split(",")) if args.name else None
    jobs = [j for j in jobs if (names is None or j.get("name") in names)
            and (states is None or j.get("state") in states)]  # fmt: skip
    jobs.sort(key=lambda j: (j.get("submitted_at") or 0.0, j.get("id") or ""))  # oldest first
    if args.json:
        print(json.dumps(jobs, indent=2, sort_keys=True))
        return 1 if failed else 0
    sep = "|" if args.parsable or args.parsable2 else None
    text = slurm_format.sacct(
        jobs, fmt, time.time(), header=not args.noheader, sep=sep, trailing=args.parsable
    )
    if text:
        print(text)
    return 1 if failed else 0


def _by_id(c: RestClient, ids: list[str], command: str) -> tuple[list[dict[str, Any]], int]:
    """Each id as the API resolves it (prefix, array id: its tasks); a refused one on stderr."""
    jobs: list[dict[str, Any]] = []
    failed = 0
    for wanted in ids:
        try:
            job = c.get(f"/v1/jobs/{quote(wanted, safe='')}")
            if job.get("tasks") is not None:  # an array (Q7): each task is a job of its own
                jobs += [c.get(f"/v1/jobs/{quote(t, safe='')}") for t in job["tasks"]]
            else:
                jobs.append(job)
        except ApiError as e:
            print(f"jpu {command}: error: {wanted}: {e}", file=sys.stderr)
            failed += 1
    return jobs, failed


def _listed(
    c: RestClient, args: argparse.Namespace, states: list[str] | None
) -> list[dict[str, Any]]:
    """`GET /v1/jobs` page by page: the caller's (or `-u`'s, or with `-a` every visible) jobs
    submitted in the window — since midnight unless `-S`, as sacct — and, with no `-E`, those
    not ended yet whenever they were submitted (sacct shows yesterday's job still running)."""
    user = args.user
    if user is None and not args.allusers:
        user = c.get("/v1/me")["user"]
    base: dict[str, Any] = {"user": user, "lab": args.accounts, "limit": lists.PAGE_MAX}
    window = {
        "state": ",".join(states) if states else None,
        "since": when(args.starttime, "--starttime", _midnight()),
        "until": when(args.endtime, "--endtime", None),
    }
    queries = [window]
    if args.endtime is None:
        live = [s for s in (states or STATES) if s not in TERMINAL]
        queries += [{"state": ",".join(live)}] if live else []
    found: dict[str, dict[str, Any]] = {}
    for query in queries:
        params = {k: v for k, v in {**base, **query}.items() if v is not None}
        found.update((j["id"], j) for j in _pages(c, params))
    return list(found.values())


def _pages(c: RestClient, params: dict[str, Any]) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = c.get("/v1/jobs", {**params, **({"cursor": cursor} if cursor else {})})
        jobs += page.get("jobs", [])
        cursor = page.get("next_cursor")
        if cursor is None:
            return jobs


# --- scontrol --------------------------------------------------------------------------------


def _scontrol(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["hold", "uhold", "release", "show"], help="what to do")
    p.add_argument("words", nargs="*", metavar="ARG", help="`job [ID]`, or ids to hold/release")
    p.add_argument("-o", "--oneliner", action="store_true", help="one line per job")
    p.add_argument("-d", "--details", action="store_true", help="accepted (all is shown)")
    p.set_defaults(func=cmd_scontrol)


def cmd_scontrol(args: argparse.Namespace) -> int:
    if args.action == "show":
        if not args.words or args.words[0].lower() not in ("job", "jobs", "jobid"):
            raise RestError("only `scontrol show job [ID]` is served here (see `jpu sinfo`)")
        return _show(args, split_ids(args.words[1:]))
    ids = split_ids(args.words)
    if not ids:
        raise RestError(f"{args.action}: give the job ids")
    what = "release" if args.action == "release" else "hold"
    failed = 0
    with _client(args) as c:
        for job_id in ids:  # silent on success, as scontrol
            try:
                c.post(f"/v1/jobs/{quote(job_id, safe='')}/{what}", {})
            except ApiError as e:
                print(f"jpu scontrol: error: {job_id}: {e}", file=sys.stderr)
                failed += 1
    return 1 if failed else 0


def _show(args: argparse.Namespace, ids: list[str]) -> int:
    failed = 0
    with _client(args) as c:
        if ids:
            jobs, failed = _by_id(c, ids, "scontrol")
        else:  # every job of the caller's not yet ended, as slurmctld holds them
            states = ",".join(s for s in STATES if s not in TERMINAL)
            jobs = c.get("/v1/jobs", {"state": states, "limit": lists.PAGE_MAX}).get("jobs", [])
    if args.json:
        print(json.dumps(jobs, indent=2, sort_keys=True))
    elif jobs:
        now = time.time()
        sep = "\n" if args.oneliner else "\n\n"
        print(sep.join(slurm_format.scontrol_show(j, now, one_line=args.oneliner) for j in jobs))
    elif not failed:
        print("No jobs in the system")
    return 1 if failed else 0

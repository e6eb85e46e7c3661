"""`jpu queue` (like squeue) and `jpu jobs` / `jpu history` (like sacct) (SPEC U1, §8).

`queue`: `GET /v1/queue` — the global queue by rank, the personal queues and the running jobs,
filtered by `-u/--user`, `--me`, `--lab`, `--state S[,S]` (JPU states or squeue's short ones:
PD, R, CG); `--start` adds the dispatcher's estimated starts as ESTIMATED_START (SPEC U4).
`jobs`: `GET /v1/jobs`, newest first, followed page by page (`next_cursor`) up to
`--limit` rows or `--all`; `history` is `jobs` of ended jobs.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

import jpu.cli.rest.views as views
from jpu.cli.rest.client import ApiError, RestClient, RestError, resolve_target
from jpu.domain.dependencies import NEVER_SATISFIED
from jpu.domain.states import PENDING, PLACED, STATES, TERMINAL, in_order

QUEUED: Final = in_order(PENDING)  # both queues: what `squeue` calls pending
HOLDING: Final = in_order(PLACED)
ENDED: Final = in_order(TERMINAL)
# squeue/sacct's names for the same states
ALIASES: Final = {
    "PD": QUEUED, "PENDING": QUEUED, "R": ("DISPATCHED", "RUNNING"), "CG": ("CANCELLING",),
    "CD": ("COMPLETED",), "F": ("FAILED",), "CA": ("CANCELLED",), "ENDED": ENDED,
}  # fmt: skip
PAGE_MAX: Final = 500  # GET /v1/jobs `limit` at most


def parse_states(text: str | None) -> list[str] | None:
    """`--state running,PD` → JPU state names; RestError names an unknown one and the valid."""
    if not text:
        return None
    out: list[str] = []
    for word in (w.strip().upper() for w in text.split(",") if w.strip()):
        if word in STATES:
            out.append(word)
        elif word in ALIASES:
            out.extend(ALIASES[word])
        else:
            valid = ", ".join([*STATES, *ALIASES])
            raise RestError(f"--state {word}: unknown state; valid: {valid}")
    return list(dict.fromkeys(out))


def parse_when(text: str | None, flag: str) -> float | None:
    """sacct's `-S/-E`: an ISO date or date-time (local time) → epoch seconds."""
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError as e:
        raise RestError(f"{flag} {text!r}: use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]") from e


def add_parsers(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    q = sub.add_parser("queue", parents=common, help="queued and running jobs (like squeue)")
    _filters(q)
    q.add_argument("--me", action="store_true", help="only my jobs")
    q.add_argument("--start", action="store_true", help="estimated start times (SPEC U4)")
    q.set_defaults(func=cmd_queue)
    for name, helptext in (
        ("jobs", "your jobs, newest first (like sacct)"),
        ("history", "your ended jobs, newest first (like sacct)"),
    ):
        p = sub.add_parser(name, parents=common, help=helptext)
        _filters(p)
        p.add_argument("-S", "--starttime", metavar="WHEN", help="submitted at or after")
        p.add_argument("-E", "--endtime", metavar="WHEN", help="submitted before")
        # -n is the job's name, as in squeue/scancel (sbatch's -J); the count is --limit only
        p.add_argument("--limit", type=int, default=50, help="at most N jobs (50)")
        p.add_argument("--all", action="store_true", help="every job (all pages)")
        p.set_defaults(func=cmd_jobs, ended_only=name == "history")


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("-u", "--user", help="only this user's jobs")
    p.add_argument("--lab", help="only this lab's jobs")
    p.add_argument("--state", "-t", metavar="S[,S]", help="only these states (PD, R, … too)")
    p.add_argument("-n", "--name", help="only jobs with this name (as squeue/scancel -n)")


def _client(args: argparse.Namespace) -> RestClient:
    return RestClient(resolve_target(args.url, args.token))


def _print(args: argparse.Namespace, data: Any, render: Callable[[Any], str]) -> int:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else render(data))
    return 0


def cmd_queue(args: argparse.Namespace) -> int:
    states = parse_states(args.state)
    with _client(args) as c:
        user = c.get("/v1/me")["user"] if args.me else args.user
        params = {"user": user, "lab": args.lab, "state": ",".join(states) if states else None}
        data = c.get("/v1/queue", {k: v for k, v in params.items() if v})
        if args.name is not None:  # the API has no name filter: the rows with that name
            for key in ("queue", "running"):
                if isinstance(data.get(key), list):
                    data[key] = [e for e in data[key] if e.get("name") == args.name]
        notice = maintenance_notice(c, args)
        gone = [] if args.json else _never_met(c, args)
    if notice:
        print(notice)
    _print(args, data, lambda d: views.queue(d, start=args.start))
    if gone:  # Q8: they left the queue at once; say why rather than let them vanish
        print(views.never_met(gone))
    return 0


def maintenance_notice(c: RestClient, args: argparse.Namespace) -> str | None:
    """M1: maintenance (its state, since when, the admin's words) as the first line of what
    lists the queue or the pool; None when NORMAL, and with --json (the API's body, unchanged)."""
    if args.json:
        return None
    status = c.get("/v1/maintenance/status")
    return views.maintenance(status) if status.get("state", "NORMAL") != "NORMAL" else None


NEVER_MET_WINDOW_S: Final = 3600.0


def _never_met(c: RestClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The caller's (or `-u`'s) jobs of the last hour that were CANCELLED because their
    dependency can never be met (Q8): squeue would still show them pending with that reason."""
    user = args.user or c.get("/v1/me")["user"]
    since = time.time() - NEVER_MET_WINDOW_S  # ended since (the API's `since` is submitted)
    params = {"state": "CANCELLED", "user": user, "limit": PAGE_MAX}
    try:
        jobs = c.get("/v1/jobs", params).get("jobs", [])
    except ApiError:  # another user's jobs the caller may not list: the queue alone
        return []
    return [
        j
        for j in jobs
        if j.get("reason") == NEVER_SATISFIED
        and (j.get("ended_at") or 0) >= since
        and args.name in (None, j.get("name"))
    ]


def cmd_jobs(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise RestError("--limit must be at least 1")
    states = parse_states(args.state) or (list(ENDED) if args.ended_only else None)
    params: dict[str, Any] = {
        "state": ",".join(states) if states else None,
        "user": args.user,
        "lab": args.lab,
        "since": parse_when(args.starttime, "--starttime"),
        "until": parse_when(args.endtime, "--endtime"),
    }
    params = {k: v for k, v in params.items() if v is not None}
    jobs: list[dict[str, Any]] = []
    cursor: str | None = None
    with _client(args) as c:
        while True:
            left = args.limit - len(jobs)
            want = PAGE_MAX if args.all or args.name else min(PAGE_MAX, left)
            page_params = {**params, "limit": want, **({"cursor": cursor} if cursor else {})}
            page = c.get("/v1/jobs", page_params)
            jobs += [j for j in page.get("jobs", []) if args.name in (None, j.get("name"))]
            cursor = page.get("next_cursor")
            if cursor is None or (not args.all and len(jobs) >= args.limit):
                break
        jobs = jobs if args.all else jobs[: args.limit]  # a name filter may fetch more
    return _print(args, {"jobs": jobs, "next_cursor": cursor}, views.jobs)

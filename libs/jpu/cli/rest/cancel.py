"""`jpu cancel` (like scancel; SPEC U1, X5): several ids (each any unique prefix, as the API
takes), or scancel's filters `-u USER`, `--me`, `-n NAME`, `-t STATE[,STATE]` over the jobs not
yet ended (`GET /v1/jobs`), or both (the ids among the filtered jobs). Filters select the
caller's own jobs unless `-u USER` names another user: an admin's `jpu cancel -t PD` must not
empty every lab's queue. Each job is one
`POST /v1/jobs/{id}/cancel`; the answer says how many were cancelled and, for those already
running, the grace period the API reports (`SIGTERM now, SIGKILL after 30 s`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import quote

from jpu.cli.rest.client import ApiError, RestClient, RestError, resolve_target
from jpu.cli.rest.ids import expand_ids
from jpu.cli.rest.lists import PAGE_MAX, parse_states
from jpu.domain.states import STATES, TERMINAL

NOT_ENDED = [s for s in STATES if s not in TERMINAL]


def add_parser(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    text = (
        "cancel jobs (like scancel): by id (any unique prefix), or every job not yet ended "
        "that matches the filters (yours, unless -u USER); a running job gets SIGTERM at once "
        "and SIGKILL after the grace period (to checkpoint, SPEC X5)"
    )
    p = sub.add_parser(
        "cancel", parents=common, help="cancel jobs (like scancel)", description=text
    )
    p.add_argument(
        "job_ids",
        nargs="*",
        metavar="ID",
        help="job ids or unique prefixes; ID_K: an array's task; ID_[2-4,7]: several",
    )
    p.add_argument("-u", "--user", help="this user's jobs (default with filters: yours)")
    p.add_argument("--me", action="store_true", help="only my jobs (the default)")
    p.add_argument("-n", "--name", help="only jobs with this name")
    p.add_argument("-t", "--state", metavar="S[,S]", help="only jobs in these states (PD, R, …)")
    p.set_defaults(func=cmd_cancel)


def _filtered(c: RestClient, args: argparse.Namespace) -> list[str]:
    """The ids of the visible jobs not yet ended that every given filter matches."""
    states = [s for s in parse_states(args.state) or NOT_ENDED if s not in TERMINAL]
    user = args.user if args.user and not args.me else c.get("/v1/me")["user"]
    params: dict[str, Any] = {"state": ",".join(states), "limit": PAGE_MAX, "user": user}
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = c.get("/v1/jobs", {**params, **({"cursor": cursor} if cursor else {})})
        ids += [j["id"] for j in page.get("jobs", []) if args.name in (None, j.get("name"))]
        cursor = page.get("next_cursor")
        if cursor is None:
            return ids


def cancelled(jobs: list[dict[str, Any]]) -> str:
    """`Cancel requested for job ID (STATE)` or `for N jobs: …`, and the grace period when one
    of them was running (its process gets SIGTERM now, SIGKILL after the grace, X5)."""
    if len(jobs) == 1 and jobs[0].get("tasks") is not None:  # an array's id (Q7)
        # only the tasks this cancel hit: ended (or already cancelling) ones are not counted
        hit = jobs[0].get("cancelled", jobs[0]["tasks"])
        n, total = len(hit), len(jobs[0]["tasks"])
        count = f"{n} task{'s' if n != 1 else ''}" if n == total else f"{n} of {total} tasks"
        out = f"Cancel requested for array {jobs[0]['id']} ({count})"
        if n < total:
            out += "; the others had ended or were being cancelled already"
    elif len(jobs) == 1 and not _has_process(jobs[0]):
        # never started: nothing to stop, the dispatcher ends it on its next round (not a
        # CANCELLING the user has to wait out)
        out = f"Cancelled job {jobs[0]['id']} (it had not started)"
    elif len(jobs) == 1:
        out = f"Cancel requested for job {jobs[0]['id']} ({jobs[0].get('state', '?')})"
    else:
        out = f"Cancel requested for {len(jobs)} jobs: {', '.join(j['id'] for j in jobs)}"
    grace = next((j["cancel_grace_s"] for j in jobs if "cancel_grace_s" in j), None)
    if grace is not None and any(_has_process(j) for j in jobs):
        out += f"; SIGTERM now, SIGKILL after {grace:g} s (time to checkpoint)"
    return out


def _has_process(job: dict[str, Any]) -> bool:
    """Dispatched: its process is the one that gets SIGTERM (a queued job is CANCELLING for a
    moment too, but has nothing to stop). An answer is only ever about a job this cancel hit:
    one that had ended before is a 409."""
    return job.get("dispatched_at") is not None


def cmd_cancel(args: argparse.Namespace) -> int:
    filters = args.user or args.me or args.name or args.state
    if not args.job_ids and not filters:
        raise RestError("give job ids, or filters (-u USER, --me, -n NAME, -t STATE)")
    with RestClient(resolve_target(args.url, args.token)) as c:
        ids = expand_ids(args.job_ids, ranges=True)  # U8: PREFIX, PREFIX_K, PREFIX_[2-4,7]
        if filters:
            matching = _filtered(c, args)
            ids = [i for i in matching if not ids or any(i.startswith(p) for p in ids)]
            if not ids:
                print("No job to cancel: no job not yet ended matches the filters")
                return 0
        if len(ids) == 1 and not filters:  # one job: the API's answer, its error as is
            job = c.post(f"/v1/jobs/{quote(ids[0], safe='')}/cancel", {})
            print(json.dumps(job, indent=2, sort_keys=True) if args.json else cancelled([job]))
            return 0
        done, failed = [], 0
        for job_id in ids:
            try:
                done.append(c.post(f"/v1/jobs/{quote(job_id, safe='')}/cancel", {}))
            except ApiError as e:
                print(f"jpu cancel: error: {job_id}: {e}", file=sys.stderr)
                failed += 1
    if args.json:
        print(json.dumps(done, indent=2, sort_keys=True))
    elif done:
        print(cancelled(done))
    return 1 if failed else 0

"""`jpu simulate` and `jpu philly-convert` (SPEC §10): offline, no services needed."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from jpu.config import DEMOTION_MODES, ConfigError
from jpu.policy import POLICIES
from jpu.sim.audit import audit_dir
from jpu.sim.params import SimParams
from jpu.sim.philly import ConvertOptions, convert_file
from jpu.sim.run import EVENTS_FILE, SUMMARY_FILE, run_files
from jpu.sim.workload import WorkloadError, dump_jobs


class AuditFailed(Exception):
    """The replayed event log disagrees with the summary (SPEC F5)."""


USER_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    WorkloadError,
    OSError,
    KeyError,
    AuditFailed,
)
_D = SimParams()


def _on_off(value: str) -> bool:
    if value not in ("on", "off"):
        raise argparse.ArgumentTypeError("expected on or off")
    return value == "on"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="run the dispatch policy on a workload, offline",
        description="Discrete-event simulation with the services' own policy "
        "code (SPEC §10). Writes OUT/events.jsonl and OUT/summary.json.",
    )
    p.add_argument("--cluster", required=True, help="cluster YAML (tiers, nodes, labs)")
    p.add_argument("--workload", required=True, help="JSONL, one job per line")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--policy", default=_D.policy, choices=sorted(POLICIES))
    p.add_argument("--half-life-s", type=float, default=_D.half_life_s)
    p.add_argument("--cycle-s", type=float, default=_D.cycle_s, help="periodic cycle (D3)")
    p.add_argument(
        "--min-cycle-gap-s",
        type=float,
        default=_D.min_cycle_gap_s,
        help="coalescing of event-triggered cycles (D8); inf = periodic cycles only",
    )
    p.add_argument("--backfill", type=_on_off, default=_D.backfill, metavar="on|off")
    p.add_argument("--backfill-settle-s", type=float, default=_D.backfill_settle_s)
    p.add_argument(
        "--max-active-jobs",
        type=int,
        default=_D.max_active_jobs,
        help="per-user slots for users the cluster file does not list (Q5)",
    )
    p.add_argument("--max-attempts", type=int, default=_D.max_attempts, help="OOM retries (X8)")
    p.add_argument(
        "--reservation-demotion",
        choices=DEMOTION_MODES,
        default=None,
        help="how R3 demotes (SPEC R6); default: the cluster file's reservation_demotion "
        "(strict unless it says otherwise)",
    )
    p.add_argument(
        "--reservation-demotion-margin",
        type=float,
        default=None,
        help="hysteresis/damped margin, a fraction of the reserving lab's usage "
        "(default: the cluster file's, 0.1)",
    )
    p.add_argument(
        "--reservation-backfill",
        choices=["off", "limit"],
        default=None,
        help="backfill under a reservation (SPEC R7); default: the cluster file's "
        "reservation_backfill (off unless it says otherwise)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument(
        "--audit",
        action="store_true",
        help="then replay OUT/events.jsonl through the charging code and compare (F5)",
    )
    p.set_defaults(func=run_simulate)

    c = sub.add_parser(
        "philly-convert",
        help="convert the Philly trace CSV to a workload",
        description="Philly CSV (timestamp,duration,num_gpus,gpu_time,cluster) "
        "-> workload JSONL. Virtual cluster id -> lab vc-<id>, users "
        "vc-<id>-u<k> dealt round-robin.",
    )
    c.add_argument("--trace", required=True)
    c.add_argument("--out", required=True, help="workload JSONL to write")
    c.add_argument("--users-per-lab", type=int, default=3)
    c.add_argument("--start", type=datetime.fromisoformat, help="window start (ISO time)")
    c.add_argument("--days", type=float, help="window length in days")
    c.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply submission times (< 1 = arrivals closer, more load)",
    )
    c.add_argument("--max-gpus", type=int, default=8, help="widest job kept (SPEC Q1: 8)")
    c.add_argument(
        "--oversize",
        choices=["clamp", "drop"],
        default="clamp",
        help="wider jobs: clamp to --max-gpus (default, duration kept) or drop",
    )
    c.add_argument(
        "--user-limits",
        metavar="LO,HI",
        help="give each job a time limit as users do: its run x U(LO, HI), rounded up to the "
        "hour, seeded per job (e.g. 1.2,4; SPEC R7's evaluation); default: no limits",
    )
    c.add_argument("--limits-seed", type=int, default=0, help="seed of --user-limits")
    c.set_defaults(func=run_convert)


def run_simulate(args: argparse.Namespace) -> int:
    params = SimParams(
        policy=args.policy,
        half_life_s=args.half_life_s,
        cycle_s=args.cycle_s,
        min_cycle_gap_s=args.min_cycle_gap_s,
        max_active_jobs=args.max_active_jobs,
        max_attempts=args.max_attempts,
        backfill=args.backfill,
        backfill_settle_s=args.backfill_settle_s,
        progress=not args.quiet,
        reservation_demotion=args.reservation_demotion,
        reservation_demotion_margin=args.reservation_demotion_margin,
        reservation_backfill=args.reservation_backfill,
    )
    if params.reservation_demotion_margin is not None and not (
        0.0 <= params.reservation_demotion_margin < 1.0
    ):
        raise ConfigError("--reservation-demotion-margin: must be in [0, 1)")
    s = run_files(args.cluster, args.workload, args.out, params)
    util = s["gpu_utilization"]
    print(
        f"{s['policy']}: {len(s['jobs'])} jobs {s['job_states']}, makespan "
        f"{s['makespan_s'] / 86400:.2f} d, utilization {util['research']:.3f} research / "
        f"{util['with_backfill']:.3f} with backfill, Jain {s['jain_fairness']:.3f}; "
        f"wrote {args.out}/{EVENTS_FILE} ({s['counts']['events']} events), "
        f"{args.out}/{SUMMARY_FILE}"
    )
    if args.audit:
        report = audit_dir(args.out)
        if not report.ok:
            for problem in report.problems[:20]:
                print(f"audit: {problem}", file=sys.stderr)
            raise AuditFailed(f"{len(report.problems)} audit problem(s)")
        print(f"audit: OK, replayed usage of {len(report.labs)} labs matches the summary")
    return 0


def _limits(text: str | None) -> tuple[float, float] | None:
    if not text:
        return None
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError as e:
        raise ConfigError(f"--user-limits: LO,HI expected, got {text!r}") from e
    return lo, hi


def run_convert(args: argparse.Namespace) -> int:
    opts = ConvertOptions(
        users_per_lab=args.users_per_lab,
        start=args.start,
        days=args.days,
        scale=args.scale,
        max_gpus=args.max_gpus,
        oversize=args.oversize,
        limits=_limits(args.user_limits),
        limits_seed=args.limits_seed,
    )
    jobs, stats = convert_file(args.trace, opts)
    dump_jobs(jobs, args.out)
    print(
        f"read {stats.read} rows, wrote {stats.kept} jobs to {args.out} "
        f"(clamped {stats.clamped}, dropped {stats.dropped_oversize} wider than "
        f"{args.max_gpus} GPUs, {stats.outside_window} outside the window)",
        file=sys.stderr,
    )
    return 0

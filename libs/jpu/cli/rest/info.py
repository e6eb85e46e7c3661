"""`jpu whoami`, `jpu tiers` and `jpu sinfo` (like Slurm's sinfo) over the REST API (SPEC U1).

`whoami`: `GET /v1/me` (user, lab, role, job slots in use). `tiers`: `GET /v1/tiers`, best
first (T1). `sinfo`: the pool per tier from `GET /v1/placements` and `GET /v1/tiers` — GPUs
idle / busy (running a job) / reserved (held for the queue's head, R2) / down, with each
tier's VRAM and TFLOPS, under maintenance's state (M1) when it is not NORMAL. The views are
pure: decoded bodies in, text out.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from jpu.cli.rest.client import RestClient, resolve_target
from jpu.cli.rest.lists import maintenance_notice
from jpu.cli.rest.render import table


def add_parsers(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    for name, helptext, func in (
        ("whoami", "who the API token says you are: user, lab, role, job slots", cmd_whoami),
        ("tiers", "the GPU tiers, best first: model, VRAM, TFLOPS, partition", cmd_tiers),
        ("sinfo", "the pool per tier (like sinfo): GPUs idle / busy / reserved / down", cmd_sinfo),
    ):
        p = sub.add_parser(name, parents=common, help=helptext, description=helptext)
        p.set_defaults(func=func)


def whoami(me: dict[str, Any]) -> str:
    used, limit = me.get("slots_in_use"), me.get("max_active_jobs")
    return (
        f"{me['user']} (lab {me['lab']}, role {me['role']}; "
        f"{used} of {limit} job slots in use, SPEC S1)"
    )


def tiers(data: list[dict[str, Any]]) -> str:
    rows = [
        [
            t["name"], t.get("model"), t.get("vram_gb"), f"{t.get('tflops', 0):g}",
            t.get("max_gpus"), t.get("partition"), t.get("cpus_per_gpu"),
            t.get("mem_gb_per_gpu"), t.get("active", True),
        ]
        for t in data
    ]  # fmt: skip
    headers = ["TIER", "MODEL", "VRAM_GB", "TFLOPS", "MAX_GPUS", "PARTITION", "CPUS/GPU",
               "MEM_GB/GPU", "ACTIVE"]  # fmt: skip
    return table(headers, rows)


def sinfo(tier_list: list[dict[str, Any]], placements: dict[str, Any]) -> str:
    """One row per tier (best first, then tiers the configuration does not name): GPUs in all,
    idle (free or lent to backfill, not reserved: P2), busy (held by running jobs), reserved,
    down, and the nodes that have it."""
    per: dict[str, dict[str, Any]] = {}
    for p in placements.get("placements", []):
        row = per.setdefault(
            p["tier"], {"gpus": 0, "idle": 0, "busy": 0, "reserved": 0, "down": 0, "nodes": []}
        )
        row["gpus"] += p.get("capacity", 0) + p.get("down", 0)
        row["idle"] += p.get("idle", 0)
        row["busy"] += sum(len(j.get("gpus", [])) for j in p.get("running", []))
        row["reserved"] += sum(len(j.get("gpus", [])) for j in p.get("reserved", []))
        row["down"] += p.get("down", 0)
        row["nodes"].append(p["node"])
    known = {t["name"]: t for t in tier_list}
    order = [t["name"] for t in tier_list] + sorted(set(per) - set(known))
    rows = []
    for name in order:
        t, r = known.get(name, {}), per.get(name)
        if r is None:
            continue  # a configured tier with no GPU in the inventory
        state = "" if t.get("active", True) else " (inactive)"
        rows.append(
            [
                name + state, t.get("vram_gb"), f"{t['tflops']:g}" if "tflops" in t else None,
                r["gpus"], r["idle"], r["busy"], r["reserved"], r["down"], r["nodes"],
            ]
        )  # fmt: skip
    headers = ["TIER", "VRAM_GB", "TFLOPS", "GPUS", "IDLE", "BUSY", "RESERVED", "DOWN", "NODES"]
    return table(headers, rows)


def _client(args: argparse.Namespace) -> RestClient:
    return RestClient(resolve_target(args.url, args.token))


def _print(args: argparse.Namespace, data: Any, text: str) -> int:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)
    return 0


def cmd_whoami(args: argparse.Namespace) -> int:
    with _client(args) as c:
        me = c.get("/v1/me")
    return _print(args, me, whoami(me))


def cmd_tiers(args: argparse.Namespace) -> int:
    with _client(args) as c:
        data = c.get("/v1/tiers")
    return _print(args, data, tiers(data))


def cmd_sinfo(args: argparse.Namespace) -> int:
    with _client(args) as c:
        tier_list, pool = c.get("/v1/tiers"), c.get("/v1/placements")
        notice = maintenance_notice(c, args)
    if notice:  # M1: draining or active, first, as `jpu queue` says it
        print(notice)
    return _print(args, {"tiers": tier_list, **pool}, sinfo(tier_list, pool))

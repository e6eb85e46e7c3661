"""API bodies (SPEC §8) → text for people. Pure: each view takes the decoded JSON body."""

from __future__ import annotations

import json
from typing import Any

from jpu.cli.rest_render import fields, fmt_duration, fmt_ts, fmt_usage, table

_EVENT_META = {"type", "event_id", "ts", "schema_version", "job_id", "seq"}
_TIME_KEYS = {"since", "as_of"}


def submitted(job: dict[str, Any]) -> str:
    return f"Submitted job {job['id']} ({job.get('state', '?')})"


def cancelled(job: dict[str, Any]) -> str:
    return f"Cancel requested for job {job['id']} ({job.get('state', '?')})"


def queue(data: dict[str, Any]) -> str:
    rows = [
        [
            e.get("rank") or "-",
            e["job_id"],
            e.get("name"),
            e.get("lab"),
            e.get("user"),
            e.get("num_gpus"),
            e.get("tiers") or "any",
            e.get("state"),
            fmt_usage(e.get("lab_usage")),
            e.get("pending_reason"),
        ]
        for e in data.get("queue", [])
    ]
    headers = ["RANK", "JOBID", "NAME", "LAB", "USER", "GPUS", "TIERS", "STATE", "LAB_USAGE"]
    out = table([*headers, "REASON"], rows)
    state = data.get("maintenance", "NORMAL")
    if state != "NORMAL":
        out = f"Maintenance: {state} (nothing is dispatched)\n{out}"
    return out


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


def job(j: dict[str, Any]) -> str:
    ran = None
    if j.get("started_at") is not None:
        ran = fmt_duration((j.get("ended_at") or j["started_at"]) - j["started_at"])
    pairs: list[tuple[str, Any]] = [
        ("JobId", j["id"]),
        ("Name", j.get("name")),
        ("User", f"{j.get('user')} (lab {j.get('lab')})"),
        ("State", j.get("state")),
        ("Attempt", j.get("attempt")),
        ("GPUs", j.get("num_gpus")),
        ("Tiers", j.get("tiers") or "any"),
        ("MinVramGB", j.get("min_vram_gb")),
        ("TimeLimit", fmt_duration(j.get("time_limit_s"))),
        ("Submitted", fmt_ts(j.get("submitted_at"))),
    ]
    if j.get("rank") is not None or j.get("pending_reason"):
        pairs += [("Rank", j.get("rank")), ("Reason", j.get("pending_reason"))]
    pairs += [
        ("Reservation", _reservation(j)),
        ("Placement", _placement(j)),
        ("Started", fmt_ts(j.get("started_at"))),
        ("Ended", fmt_ts(j.get("ended_at"))),
        ("RunTime", ran),
        ("BackendJobId", j.get("backend_job_id")),
        ("Isolation", j.get("isolation")),
        ("ExitCode", j.get("exit_code")),
        ("EndReason", j.get("reason")),
        ("UsageCharged", fmt_usage(j.get("usage_charged"))),
    ]
    if j.get("oom"):
        pairs.append(("GpuOOM", True))
    if j.get("kill_failed"):
        pairs.append(("KillFailed", True))
    if j.get("cancel_requested_by"):
        pairs.append(("CancelledBy", j["cancel_requested_by"]))
    out = fields(pairs)
    if j.get("command") is not None:
        out += "\n--- command ---\n" + str(j["command"]).rstrip("\n")
    return out


def _details(event: dict[str, Any]) -> str:
    parts = []
    for key, value in event.items():
        if key in _EVENT_META or value is None or value is False or value in ([], {}, ""):
            continue
        if key == "command":
            value = f"<{len(str(value))} chars>"
        elif isinstance(value, float) and (key.endswith("_at") or key in _TIME_KEYS):
            value = fmt_ts(value).replace(" ", "T")
        elif isinstance(value, float):
            value = f"{value:.6g}"
        elif isinstance(value, list):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, dict):
            value = json.dumps(value, separators=(",", ":"), sort_keys=True)
        parts.append(f"{key}={value}")
    return " ".join(parts)


def events(data: dict[str, Any]) -> str:
    rows = [
        [e.get("seq"), fmt_ts(e.get("ts")), e.get("type"), _details(e)]
        for e in data.get("events", [])
    ]
    return table(["SEQ", "TIME", "EVENT", "DETAILS"], rows)


def _lab_row(lab: dict[str, Any]) -> list[Any]:
    return [
        lab["lab"],
        fmt_usage(lab.get("usage")),
        fmt_usage(lab.get("raw_value")),
        fmt_ts(lab.get("as_of")),
        lab.get("running", 0),
        lab.get("queued", 0),
        lab.get("personal_queue", 0),
    ]


_LAB_HEADERS = ["LAB", "USAGE_NOW", "RAW", "AS_OF", "RUNNING", "QUEUED", "PERSONAL"]


def labs(data: dict[str, Any]) -> str:
    rows = sorted(data.get("labs", []), key=lambda lab: lab.get("usage") or 0.0)
    return table(_LAB_HEADERS, [_lab_row(lab) for lab in rows]) + "\n(usage in TFLOP-s, decayed)"


def one_lab(data: dict[str, Any]) -> str:
    return table(_LAB_HEADERS, [_lab_row(data)])


def _jobs(entries: list[dict[str, Any]], key: str = "job_id") -> str:
    return " ".join(f"{e[key]}[{','.join(str(g) for g in e.get('gpus', []))}]" for e in entries)


def pool(data: dict[str, Any]) -> str:
    rows = []
    for p in data.get("placements", []):
        backfill = " ".join(f"{b['backfill_id']}[{b['gpu']}]" for b in p.get("backfilled", []))
        rows.append(
            [
                p["node"],
                p["tier"] + ("" if p.get("active", True) else " (inactive)"),
                p.get("capacity"),
                p.get("idle"),
                p.get("down", 0),
                _jobs(p.get("running", [])) or "-",
                _jobs(p.get("reserved", [])) or "-",
                backfill or "-",
            ]
        )
    headers = ["NODE", "TIER", "CAPACITY", "IDLE", "DOWN", "RUNNING", "RESERVED", "BACKFILL"]
    return table(headers, rows)


def maintenance(data: dict[str, Any]) -> str:
    since = f" since {fmt_ts(data['since'])}" if data.get("since") else ""
    message = f": {data['message']}" if data.get("message") else ""
    return f"Maintenance: {data.get('state', '?')}{since}{message}"

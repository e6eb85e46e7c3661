"""API bodies (SPEC §8) → text for people. Pure: each view takes the decoded JSON body."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jpu.cli.rest.jobviews import job as job  # the job views live there (re-exported)
from jpu.cli.rest.jobviews import jobs as jobs
from jpu.cli.rest.jobviews import never_met as never_met
from jpu.cli.rest.jobviews import queue as queue
from jpu.cli.rest.render import fmt_ts, fmt_usage, table

_EVENT_META = {"type", "event_id", "ts", "schema_version", "job_id", "seq"}
_TIME_KEYS = {"since", "as_of"}


def held(job: dict[str, Any]) -> str:
    """`jpu hold` / `jpu release` (Q9)."""
    what = "held" if job.get("held") else "released"
    reason = job.get("pending_reason")  # none once released and promoted: then not said
    why = f", reason {reason}" if reason else ""
    return f"Job {job['id']} {what} ({job.get('state', '?')}{why})"


def logs_json(job_id: str, headers: Mapping[str, str], data: bytes) -> dict[str, Any]:
    """`jpu logs --json`: the bytes read (as UTF-8 text) and where they are in the file."""

    def number(name: str) -> int | None:
        value = headers.get(name)
        return int(value) if value is not None and value.lstrip("-").isdigit() else None

    return {
        "job_id": headers.get("Jpu-Log-Job", job_id),  # the full id when a prefix was given
        "attempt": number("Jpu-Log-Attempt"),
        "stream": headers.get("Jpu-Log-Stream"),
        "offset": number("Jpu-Log-Start"),
        "next_offset": number("Jpu-Log-End"),
        "size": number("Jpu-Log-Size"),
        "ended": headers.get("Jpu-Log-Ended") == "true",
        "output": data.decode("utf-8", "replace"),
    }


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
        fmt_usage(lab.get("accrued_uncharged")),
        fmt_usage(lab.get("raw_value")),
        fmt_ts(lab.get("as_of")),
        lab.get("running", 0),
        lab.get("queued", 0),
        lab.get("personal_queue", 0),
    ]


_LAB_HEADERS = [
    "LAB",
    "USAGE_NOW",
    "ACCRUED(UNCHARGED)",
    "RAW",
    "AS_OF",
    "RUNNING",
    "QUEUED",
    "PERSONAL",
]
# F4: the charged usage orders the queue (D1); ACCRUED is charged only when the jobs end
_LAB_LEGEND = (
    "\n(TFLOP-s) USAGE_NOW: charged usage, decayed — what orders the queue; ACCRUED(UNCHARGED):"
    " what the lab's running jobs and reservations have cost so far, charged when they end"
)


def labs(data: dict[str, Any]) -> str:
    rows = sorted(data.get("labs", []), key=lambda lab: lab.get("usage") or 0.0)
    return table(_LAB_HEADERS, [_lab_row(lab) for lab in rows]) + _LAB_LEGEND


def one_lab(data: dict[str, Any]) -> str:
    return table(_LAB_HEADERS, [_lab_row(data)]) + _LAB_LEGEND


def usage_explanation(data: dict[str, Any]) -> str:
    """`jpu usage --explain`: the table `jpu-admin explain-usage` prints, from the API's body
    (the same jpu.explain.usage answer, decoded back into its model)."""
    import msgspec

    from jpu.explain.usage import UsageExplanation
    from jpu.tools.admin_usage import render_explanation

    return render_explanation(msgspec.convert(data, UsageExplanation))


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

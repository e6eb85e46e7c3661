"""What Slurm 22.05's CLI prints, turned into the backend contract's terms (SPEC X6, X9). Pure.

Facts this relies on (measured, see SLURM-NOTES): `squeue --json` lists every job slurmctld still
holds (finished ones for MinJobAge) and ignores `-j`, so we filter ourselves; its `exit_code` is a
raw wait status (768 = exit 3, 9 = SIGKILL); `sinfo --json` gives per node `gres` ("gpu:T:N,…"),
`gres_used` ("gpu:T:1(IDX:0)"), `state` and `state_flags` (DRAIN); `sacct -c` reads the jobcomp
file and prints ExitCode as "exit:signal".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import msgspec

from jpu.backends.base import BackendState, NodeInventory

# Slurm job states → the contract's. COMPLETING is not final: the node still holds the GPUs.
_STATES: dict[str, BackendState] = {
    "PENDING": "PENDING",
    "CONFIGURING": "PENDING",
    "REQUEUED": "PENDING",
    "REQUEUE_HOLD": "PENDING",
    "REQUEUE_FED": "PENDING",
    "RESV_DEL_HOLD": "PENDING",
    "RUNNING": "RUNNING",
    "COMPLETING": "RUNNING",
    "SUSPENDED": "RUNNING",
    "STOPPED": "RUNNING",
    "SIGNALING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "RESIZING": "RUNNING",
    "COMPLETED": "COMPLETED",
    "FAILED": "FAILED",
    "SPECIAL_EXIT": "FAILED",
    "TIMEOUT": "TIMEOUT",
    "DEADLINE": "TIMEOUT",
    "CANCELLED": "CANCELLED",
    "REVOKED": "CANCELLED",
    "NODE_FAIL": "NODE_FAIL",
    "BOOT_FAIL": "NODE_FAIL",
    "PREEMPTED": "PREEMPTED",
    "OUT_OF_MEMORY": "OUT_OF_MEMORY",
}


class SlurmJob(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of one job we use, from `squeue --json` (or `sacct -c` once it aged out)."""

    job_id: int
    name: str
    state: str  # Slurm's own word, e.g. "COMPLETING"
    reason: str = ""
    user: str = ""
    node: str | None = None
    partition: str = ""
    exit_status: int | None = None  # raw wait status, None when unknown
    start_time: float | None = None
    end_time: float | None = None
    stdout: str = ""
    stderr: str = ""
    workdir: str = ""
    comment: str = ""  # ours: "jpu isolation=… limit=…" (jobs.py)
    submit_time: float | None = None

    @property
    def backend_state(self) -> BackendState:
        return map_state(self.state)

    @property
    def terminal(self) -> bool:
        return self.backend_state not in ("PENDING", "RUNNING")


def map_state(slurm_state: str) -> BackendState:
    base = slurm_state.split()[0].rstrip("+").upper() if slurm_state else "PENDING"
    if base.startswith("CANCELLED"):  # sacct prints "CANCELLED by 0"
        return "CANCELLED"
    return _STATES.get(base, "FAILED")


def decode_wait_status(raw: int | None) -> tuple[int | None, int | None]:
    """(exit code, signal) of a raw wait status: exit code None when a signal ended the job."""
    if raw is None:
        return None, None
    sig = raw & 0x7F
    if sig:
        return None, sig
    return (raw >> 8) & 0xFF, None


def _epoch(value: Any) -> float | None:
    if isinstance(value, int | float) and value > 0:
        return float(value)
    return None


def job_from_squeue(j: Mapping[str, Any]) -> SlurmJob:
    nodes = j.get("nodes") or j.get("batch_host") or None
    return SlurmJob(
        job_id=int(j["job_id"]),
        name=str(j.get("name", "")),
        state=str(j.get("job_state", "PENDING")),
        reason=str(j.get("state_reason", "") or ""),
        user=str(j.get("user_name", "") or ""),
        node=str(nodes) if nodes else None,
        partition=str(j.get("partition", "") or ""),
        exit_status=j.get("exit_code") if isinstance(j.get("exit_code"), int) else None,
        start_time=_epoch(j.get("start_time")),
        end_time=_epoch(j.get("end_time")),
        stdout=str(j.get("standard_output", "") or ""),
        stderr=str(j.get("standard_error", "") or ""),
        workdir=str(j.get("current_working_directory", "") or ""),
        comment=str(j.get("comment", "") or ""),
        submit_time=_epoch(j.get("submit_time")),
    )


def jobs_from_squeue(doc: Mapping[str, Any], prefix: str) -> dict[int, SlurmJob]:
    """Our jobs (name starts with `prefix`) by Slurm job id."""
    out = {}
    for raw in doc.get("jobs", []):
        if str(raw.get("name", "")).startswith(prefix):
            job = job_from_squeue(raw)
            out[job.job_id] = job
    return out


SACCT_FIELDS = "JobID,JobName,State,ExitCode,Start,End,NodeList,Partition,User,WorkDir"


def _sacct_time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:  # "Unknown", "None"
        return None


def job_from_sacct(line: str) -> SlurmJob | None:
    """One `sacct -c -P -n --format=SACCT_FIELDS` line (the jobcomp record of a finished job)."""
    parts = line.split("|")
    if len(parts) < 10 or not parts[0].isdigit():
        return None
    jid, name, state, exit_code, start, end, node, partition, user, workdir = parts[:10]
    code, _, sig = exit_code.partition(":")
    raw = None
    if code.isdigit() and sig.isdigit():
        raw = int(sig) & 0x7F if int(sig) else (int(code) & 0xFF) << 8
    return SlurmJob(
        job_id=int(jid), name=name, state=state, node=node or None, partition=partition,
        exit_status=raw, start_time=_sacct_time(start), end_time=_sacct_time(end),
        user=user, workdir=workdir,
    )  # fmt: skip


_GRES = re.compile(r"gpu:([^:,()]+):(\d+)")


def gres_counts(gres: str) -> dict[str, int]:
    """ "gpu:rtx4090:2,gpu:rtx5090:4(S:0)" → {"rtx4090": 2, "rtx5090": 4} (typed GPUs only)."""
    counts: dict[str, int] = {}
    for tier, n in _GRES.findall(gres or ""):
        counts[tier] = counts.get(tier, 0) + int(n)
    return counts


def node_state(node: Mapping[str, Any]) -> str:
    """up | drain | down, as the platform sees GPUs (P2: drain/down GPUs are not capacity)."""
    state = str(node.get("state", "")).lower()
    flags = {str(f).upper() for f in node.get("state_flags", []) or []}
    if state in ("down", "future", "unknown") or "NOT_RESPONDING" in flags:
        return "down"
    if flags & {"DRAIN", "FAIL", "MAINTENANCE", "REBOOT_REQUESTED"} or "drain" in state:
        return "drain"
    return "up"


def inventory_from_sinfo(doc: Mapping[str, Any]) -> list[NodeInventory]:
    out = []
    for node in doc.get("nodes", []):
        gpus = gres_counts(str(node.get("gres", "")))
        state = node_state(node)
        down = {tier: list(range(n)) for tier, n in gpus.items()} if state != "up" else {}
        out.append(
            NodeInventory(
                node=str(node["name"]),
                gpus=gpus,
                down=down,
                state=state,
                reason=str(node.get("reason") or "") or None,
            )
        )
    return sorted(out, key=lambda n: n.node)


def used_gpus(nodes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """node → tier → GPUs in use (`gres_used`), e.g. for idle = gres − used."""
    return {str(n["name"]): gres_counts(str(n.get("gres_used", ""))) for n in nodes}


# `squeue --noheader --states=all --Format=…` for watching jobs we have records of: only fields
# Slurm itself writes (no job name, comment or path), so no job's own text can split or forge a
# line; times as epochs (SLURM_TIME_FORMAT=%s). About 1/50 of `--json`'s bytes per job.
SQUEUE_FIELDS = (
    "JobID", "State", "Reason", "UserName", "NodeList", "BatchHost", "Partition", "exit_code",
    "StartTime", "EndTime", "SubmitTime",
)  # fmt: skip
SQUEUE_FORMAT = ",".join(f"{field}:|" for field in SQUEUE_FIELDS)  # no width: "|" ends each
# …and the job name last, for lookups by exact names of ours (jpu-<id>-<n>: no "|" in them)
SQUEUE_NAMED_FORMAT = f"{SQUEUE_FORMAT},Name:|"


def _text_epoch(text: str) -> float | None:
    return float(text) if text.isdigit() and int(text) > 0 else None  # "NONE", "N/A", "0"


def _text_node(text: str) -> str | None:
    return text if text and text.lower() not in ("n/a", "(null)") else None


def states_from_squeue(text: str) -> dict[int, SlurmJob]:
    """Every job of a SQUEUE_FORMAT listing by Slurm job id. The name, comment and paths are not
    in it: a caller knows them from its own record of the job."""
    out = {}
    width = len(SQUEUE_FIELDS) + 1  # each field ends with "|"
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == width and parts[0].isdigit():  # not e.g. a pending array's "123_[1-9]"
            job = _state_line(parts)
            out[job.job_id] = job
    return out


def named_states_from_squeue(text: str, names: Iterable[str]) -> dict[str, dict[int, SlurmJob]]:
    """A SQUEUE_NAMED_FORMAT listing: for each of `names`, its jobs by Slurm job id. A line whose
    name is not one of them (or that does not split into the fields) is ignored."""
    out: dict[str, dict[int, SlurmJob]] = {name: {} for name in names}
    width = len(SQUEUE_FIELDS) + 2
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == width and parts[0].isdigit() and parts[-2] in out:
            job = msgspec.structs.replace(_state_line(parts), name=parts[-2])
            out[job.name][job.job_id] = job
    return out


def _state_line(parts: list[str]) -> SlurmJob:
    jid, state, reason, user, nodes, host, partition, code, start, end, submit = parts[:11]
    return SlurmJob(
        job_id=int(jid), name="", state=state or "PENDING", reason=reason, user=user,
        node=_text_node(nodes) or _text_node(host), partition=partition,
        exit_status=int(code) if code.isdigit() else None, start_time=_text_epoch(start),
        end_time=_text_epoch(end), submit_time=_text_epoch(submit),
    )  # fmt: skip

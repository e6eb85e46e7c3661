"""`jpu why JOB`: why a job waited, in words a lab member understands (SPEC U4).

It prints `GET /v1/jobs/{id}/wait` (jpu.explain.wait): time in each phase, each change of the
job's rank and pending reason with what caused it and the labs ahead, and each reservation with
how it ended — for an R3 demotion, the charge that reordered the queue and who ranked first.
English or Korean: `--lang`, else `JPU_LANG`, else the locale (`LC_ALL`, `LC_MESSAGES`, `LANG`
starting with `ko`), as the console follows the browser's language. Rendering is pure.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from jpu.cli.rest import subcommands as rest
from jpu.cli.rest.client import RestClient, resolve_target

USER_ERRORS: tuple[type[Exception], ...] = ()

_T: Final[dict[str, dict[str, str]]] = {
    "en": {
        "head": "Job {job} ({name}, lab {lab}, {user}): {state}",
        "phases": "Time in each phase: {phases}",
        "changes": "How its place in the queue changed:",
        "rank": "rank {rank} of {n}",
        "ahead": "ahead of it: {labs}",
        "ahead_lab": "{lab} {usage} TFLOP-s ({jobs} job{s})",
        "own": "your lab {lab}: {usage} TFLOP-s",
        "because": "because ",
        "sampled": "(sampled far back in the queue: several events since the line before)",
        "reservations": "Reservations:",
        "no_reservations": "It never held a reservation.",
        "res": "{node} ({tier}, GPU {gpus}) from {start}",
        "res_held": ", still held",
        "res_end": " to {end} ({secs}): released — {reason}",
        "res_cost_now": "; {cost} TFLOP-s charged to {lab} at once (R3)",
        "res_cost_later": "; its {cost} TFLOP-s are charged with the run (R4)",
        "demoted_why": "Why: {cause}; then {first_lab}'s job {first} ({first_usage} TFLOP-s) "
        "ranked first, and only the rank-1 job keeps a reservation (R3).",
        "note": "Ranks follow each lab's decayed usage (lowest first), then entry time (D1).",
        "phase.personal_queue": "personal queue",
        "phase.global_queue": "global queue",
        "phase.reserving": "reserving",
        "phase.starting": "dispatched → started",
        "phase.running": "running",
        "phase.cancelling": "cancelling",
        "phase.retry_decision": "OOM retry decision",
        "reason.Priority": "a higher-ranked job takes the resources it needs",
        "reason.Resources": "no placement it fits has enough idle GPUs",
        "reason.Reservation": "holding a reservation, waiting for more GPUs",
        "reason.Maintenance": "maintenance: nothing is dispatched",
        "reason.ConcurrencyLimit": "waiting for a slot: all of {user}'s slots are held, by "
        "{jobs} (S1)",
        "reason.ConcurrencyLimit.none": "waiting for a slot: no job of {user} holds one, yet "
        "their limit (max_active_jobs) admits no more now (S1)",
        "reason.MinVram": "waits for a GPU with at least {min_vram} GB; only smaller GPUs are idle "
        "(D7)",
        "reason.Dependency": "it waits for the jobs it depends on, holding no slot (Q8)",
        "reason.Held": "it is held: `jpu release ID` lets it run (Q9)",
        "reason.ArrayThrottle": "waiting for its array's %N: the tasks {jobs} hold every slot "
        "the array may use at once; the next of them to end lets it run (Q7)",
        "reason.none": "GPUs free: dispatched in this cycle",
        "release.demoted": "demoted, it was no longer rank 1",
        "release.swap": "it ran elsewhere (swap)",
        "release.dispatched": "it ran on these GPUs",
        "release.cancelled": "the job was cancelled",
        "release.maintenance": "maintenance",
        "release.capacity": "the placement lost GPUs",
        "state.PERSONAL_QUEUE_WAIT": "in the personal queue",
        "state.GLOBAL_QUEUE_WAIT": "in the global queue",
        "state.RESERVING": "reserving",
        "state.DISPATCHED": "dispatched",
        "state.RUNNING": "running",
        "state.CANCELLING": "cancelling",
        "state.COMPLETED": "completed",
        "state.FAILED": "failed",
        "state.CANCELLED": "cancelled",
        "cause.submitted": "it was submitted; every job enters "
        "its user's personal queue first (Q4)",
        "cause.promoted_free_slot": "{user} had a free slot ({count} of their other jobs held "
        "slots): promoted {after}",
        "cause.promoted_slot_freed": "job {jobs} ended and freed one of {user}'s slots: "
        "promoted after {waited} (Q5)",
        "cause.retried": "it ran out of GPU memory on {tier} ({vram} GB): retried on a GPU with at "
        "least {min_vram} GB (X8)",
        "cause.retry_declined.max_attempts": "no retry: it ran out of GPU memory on its last "
        "allowed attempt (X8)",
        "cause.retry_declined.no_fit": "no retry: no GPU has the {min_vram} GB it would need (X8)",
        "cause.reserved": "it is rank 1 and needs {needed} GPUs, but {node} ({tier}) had only "
        "{count} idle: it holds those while the rest free up (R1)",
        "cause.reservation_grown": "GPU {gpus} on {node} freed{freed}: it now holds {count} of "
        "{needed} (R2)",
        "cause.reservation_shrunk.lost": "GPU {gpus} on {node} went down or was taken: it still "
        "holds {count} of {needed} (R5)",
        "cause.reservation_shrunk.yielded": "it gave GPU {gpus} on {node} to a higher-ranked job "
        "that could start only there; it holds {count} of {needed} (R6)",
        "cause.reservation_shrunk.lent": "it lent GPU {gpus} on {node} to {jobs}, whose time "
        "limit ends before it could start anyway; they come back to it; it holds {count} of "
        "{needed} (R7)",
        "cause.released_demoted": "it was no longer rank 1: {other_lab}'s job {jobs} ranked first, "
        "and only the rank-1 job keeps a reservation (R3)",
        "cause.released_maintenance": "maintenance began: every reservation is released (M1)",
        "cause.released_capacity": "its placement on {node} lost GPUs or its tier was turned off: "
        "the reservation was released (R5)",
        "cause.released_cancelled": "it was cancelled: its reservation was released",
        "cause.released_to_run": "all {needed} GPUs it needs are free on {node}: it starts on its "
        "reservation",
        "cause.released_swap": "enough GPUs freed elsewhere first: it starts there and lets its "
        "reservation on {node} go (R4)",
        "cause.dispatched": "{node} ({tier}) had GPU {gpus} free for it{freed}",
        "cause.dispatched_reserved": "the last of the GPUs it reserved on {node} freed{freed}: all "
        "{needed} are its (R2)",
        "cause.dispatched_lent": "its time limit ends before {jobs} can start: it started on "
        "GPU {gpus} on {node} that {jobs}'s reservation held, lent until then (R7)",
        "cause.started": "{node} started it",
        "cause.completed": "its command exited with code 0",
        "cause.exited": "its command exited with code {code}",
        "cause.out_of_memory": "it ran out of GPU memory on {tier} ({vram} GB) (X7)",
        "cause.timed_out": "it ran past its time limit",
        "cause.failed": "it failed: {reason}",
        "cause.cancelled": "it was cancelled",
        "cause.cancel_requested": "{by} cancelled it",
        "cause.held": "{by} held it: it is not promoted until released (Q9)",
        "cause.released": "{by} released it: it may be promoted again (Q9)",
        "cause.dependency_never_satisfied": "a job it depends on ended so that its dependency can "
        "never be met (Q8)",
        "cause.dependency_never_satisfied.parent": "job {jobs} it depends on ended {state}, so its "
        "dependency can never be met (Q8)",
        "cause.dependency_never_satisfied.unknown": "job {jobs} it depends on is not known here, "
        "so its dependency can never be met (Q8)",
        "cause.other_entered": "job {job} ({lab}) entered the global queue",
        "cause.other_entered_ahead": "job {job} ({lab}) entered the global queue ahead of it: the "
        "lab with lower usage ranks first (D1)",
        "cause.other_retried": "job {job} ({lab}) came back to retry on a GPU with at least "
        "{min_vram} GB (X8)",
        "cause.other_ended": "job {job} ({lab}) ended, freeing GPU {gpus} on {node}",
        "cause.other_left": "job {job} ({lab}) left the queue before it ran",
        "cause.other_dispatched": "job {job} ({lab}) took GPU {gpus} on {node}",
        "cause.other_reserved": "job {job} ({lab}) reserved GPU {gpus} on {node} (R1)",
        "cause.other_reservation_changed": "job {job} ({lab}) now reserves GPU {gpus} on {node}",
        "cause.other_released": "job {job} ({lab}) let its reservation on {node} go: {why}",
        "cause.other_cancelled": "{by} cancelled job {job} ({lab})",
        "cause.charged": "{lab} was charged for job {job}",
        "cause.initial_usage": "{lab}'s starting usage was recorded",
        "cause.maintenance_draining": "the admin {by} started maintenance{message}: nothing new is "
        "dispatched (M1)",
        "cause.maintenance_recovery": "maintenance: the user jobs are done and LLM backfill is "
        "being reclaimed (M2)",
        "cause.maintenance_active": "maintenance is under way (M3)",
        "cause.maintenance_ended": "the admin {by} ended maintenance{message}: dispatching resumes",
        "cause.node_changed": "node {node} reported its GPUs ({state}, {count} down)",
        "cause.backfill_ended": "LLM backfill on GPU {gpus} of {node} stopped ({reason})",
        "at_once": "at once",
        "after": "after {waited}",
        "freed_by": ", freed by job {jobs}",
        "message": ": \u201c{message}\u201d",
        "charged": ", charging {lab} {charge} TFLOP-s (now {usage})",
        "usage": " ({lab}'s usage: {usage} TFLOP-s)",
    },
    "ko": {
        "head": "작업 {job} ({name}, {lab} 연구실, {user}): {state}",
        "phases": "단계별 시간: {phases}",
        "changes": "대기열에서 자리가 바뀐 과정:",
        "rank": "{n}개 중 {rank}위",
        "ahead": "앞선 연구실: {labs}",
        "ahead_lab": "{lab} {usage} TFLOP-s (작업 {jobs}개)",
        "own": "내 연구실 {lab}: {usage} TFLOP-s",
        "because": "원인: ",
        "sampled": "(대기열 뒤쪽이라 표본으로 봄: 이전 줄 이후 여러 이벤트)",
        "reservations": "예약:",
        "no_reservations": "예약을 잡은 적이 없습니다.",
        "res": "{node} ({tier}, GPU {gpus}) {start}부터",
        "res_held": ", 아직 예약 중",
        "res_end": " {end}까지 ({secs}): 해제 — {reason}",
        "res_cost_now": "; {cost} TFLOP-s를 즉시 {lab}에 부과 (R3)",
        "res_cost_later": "; {cost} TFLOP-s는 실행과 함께 부과 (R4)",
        "demoted_why": "이유: {cause}. 그 뒤 1위: {first_lab} 연구실의 작업 {first} "
        "({first_usage} TFLOP-s). 예약은 1위 작업만 유지합니다 (R3).",
        "note": "순위는 연구실의 감쇠된 사용량이 적은 순, 그다음 대기열 진입 시각 순입니다 (D1).",
        "phase.personal_queue": "개인 대기열",
        "phase.global_queue": "전역 대기열",
        "phase.reserving": "예약",
        "phase.starting": "배정 → 시작",
        "phase.running": "실행",
        "phase.cancelling": "취소 중",
        "phase.retry_decision": "OOM 재시도 결정",
        "reason.Priority": "순위가 더 높은 작업이 필요한 자원을 먼저 가져갑니다",
        "reason.Resources": "맞는 배치에 유휴 GPU가 부족합니다",
        "reason.Reservation": "예약을 잡고 GPU가 더 비기를 기다립니다",
        "reason.Maintenance": "점검 중이라 배정이 멈춰 있습니다",
        "reason.ConcurrencyLimit": "슬롯을 기다림: {user}의 작업 {jobs}이(가) 슬롯을 모두 쓰고 "
        "있습니다 (S1)",
        "reason.ConcurrencyLimit.none": "슬롯을 기다림: {user}의 작업 중 슬롯을 쓰는 것은 없지만 "
        "동시 실행 한도(max_active_jobs)가 지금은 더 허용하지 않습니다 (S1)",
        "reason.MinVram": "{min_vram} GB 이상인 GPU를 기다림: 더 작은 GPU만 비어 있습니다 (D7)",
        "reason.Dependency": "의존하는 작업을 기다립니다 — 슬롯은 차지하지 않습니다 (Q8)",
        "reason.Held": "보류되어 있습니다: `jpu release ID`로 풀 수 있습니다 (Q9)",
        "reason.ArrayThrottle": "배열의 %N을 기다림: 작업 {jobs}이(가) 배열이 동시에 쓸 수 있는 "
        "슬롯을 모두 쓰고 있습니다 — 그중 하나가 끝나면 실행됩니다 (Q7)",
        "reason.none": "GPU가 비어 이번 주기에 배정됩니다",
        "release.demoted": "강등 — 더 이상 1위가 아니었습니다",
        "release.swap": "다른 곳에서 실행됨 (교체)",
        "release.dispatched": "이 GPU에서 실행됨",
        "release.cancelled": "작업이 취소됨",
        "release.maintenance": "점검",
        "release.capacity": "배치의 GPU가 줄어듦",
        "state.PERSONAL_QUEUE_WAIT": "개인 대기열",
        "state.GLOBAL_QUEUE_WAIT": "전역 대기열",
        "state.RESERVING": "예약 중",
        "state.DISPATCHED": "배정됨",
        "state.RUNNING": "실행 중",
        "state.CANCELLING": "취소 중",
        "state.COMPLETED": "완료",
        "state.FAILED": "실패",
        "state.CANCELLED": "취소됨",
        "cause.submitted": "제출됨 — 모든 작업은 먼저 사용자의 개인 대기열에 들어갑니다 (Q4)",
        "cause.promoted_free_slot": "{user}에게 빈 슬롯이 있어 ({count}개의 다른 작업이 슬롯 사용) "
        "{after} 전역 대기열로 올라감",
        "cause.promoted_slot_freed": "{jobs} 작업이 끝나 {user}의 슬롯이 비어 {waited} 뒤 전역 "
        "대기열로 올라감 (Q5)",
        "cause.retried": "{tier} ({vram} GB)에서 GPU 메모리가 부족해 {min_vram} GB 이상인 GPU로 "
        "재시도 (X8)",
        "cause.retry_declined.max_attempts": "재시도 없음: 허용된 마지막 시도에서 "
        "GPU 메모리 부족 (X8)",
        "cause.retry_declined.no_fit": "재시도 없음: 필요한 {min_vram} GB를 가진 GPU가 없음 (X8)",
        "cause.reserved": "1위이고 GPU {needed}개가 필요한데 {node} ({tier})에 {count}개만 비어 "
        "있어 나머지가 빌 때까지 잡아 둠 (R1)",
        "cause.reservation_grown": "{node}의 GPU {gpus}가 비어{freed} "
        "이제 {needed}개 중 {count}개를 "
        "잡고 있음 (R2)",
        "cause.reservation_shrunk.lost": "{node}의 GPU {gpus}가 꺼지거나 "
        "다른 곳에 쓰여 {needed}개 중 "
        "{count}개만 남음 (R5)",
        "cause.reservation_shrunk.yielded": "그곳에서만 시작할 수 있는 상위 작업에 {node}의 GPU "
        "{gpus}를 양보해 {needed}개 중 {count}개를 잡고 있음 (R6)",
        "cause.reservation_shrunk.lent": "어차피 시작할 수 없는 동안 제한 시간이 그 전에 끝나는 "
        "{jobs}에게 {node}의 GPU {gpus}를 빌려줌, 끝나면 돌아옴; {needed}개 중 {count}개를 "
        "잡고 있음 (R7)",
        "cause.released_demoted": "더 이상 1위가 아님: {other_lab} "
        "연구실의 작업 {jobs}이(가) 1위가 "
        "되었고, 예약은 1위 작업만 유지합니다 (R3)",
        "cause.released_maintenance": "점검이 시작되어 모든 예약이 해제됨 (M1)",
        "cause.released_capacity": "{node}의 배치가 GPU를 잃었거나 티어가 꺼져 예약이 해제됨 (R5)",
        "cause.released_cancelled": "취소되어 예약이 해제됨",
        "cause.released_to_run": "{node}에 필요한 GPU {needed}개가 "
        "모두 비어 예약한 자리에서 시작함",
        "cause.released_swap": "다른 곳의 GPU가 먼저 비어 그곳에서 시작하고 {node}의 예약은 놓음 "
        "(R4)",
        "cause.dispatched": "{node} ({tier})의 GPU {gpus}가 비어 있었음{freed}",
        "cause.dispatched_reserved": "{node}에 예약한 GPU의 마지막 하나가 비어{freed} {needed}개가 "
        "모두 확보됨 (R2)",
        "cause.dispatched_lent": "제한 시간이 {jobs}이(가) 시작할 수 있는 때보다 먼저 끝나 "
        "{jobs}의 예약이 잡고 있던 {node}의 GPU {gpus}를 빌려 시작함 (R7)",
        "cause.started": "{node}가 작업을 시작함",
        "cause.completed": "명령이 종료 코드 0으로 끝남",
        "cause.exited": "명령이 종료 코드 {code}로 끝남",
        "cause.out_of_memory": "{tier} ({vram} GB)에서 GPU 메모리가 부족함 (X7)",
        "cause.timed_out": "시간 제한을 넘김",
        "cause.failed": "실패: {reason}",
        "cause.cancelled": "취소됨",
        "cause.cancel_requested": "{by}이(가) 취소함",
        "cause.held": "{by}이(가) 보류함: 풀릴 때까지 올라가지 않습니다 (Q9)",
        "cause.released": "{by}이(가) 보류를 풂: 다시 올라갈 수 있습니다 (Q9)",
        "cause.dependency_never_satisfied": "의존하는 작업이 끝나 의존 조건을 결코 만족할 수 없게 "
        "됨 (Q8)",
        "cause.dependency_never_satisfied.parent": "의존하는 작업 {jobs}이(가) {state}(으)로 "
        "끝나 의존 조건을 결코 만족할 수 없게 됨 (Q8)",
        "cause.dependency_never_satisfied.unknown": "의존하는 작업 {jobs}을(를) 알 수 없어 "
        "의존 조건을 결코 만족할 수 없게 됨 (Q8)",
        "cause.other_entered": "{job} ({lab}) 작업이 전역 대기열에 들어옴",
        "cause.other_entered_ahead": "{job} ({lab}) 작업이 앞 "
        "순위로 전역 대기열에 들어옴: 사용량이 "
        "적은 연구실이 먼저입니다 (D1)",
        "cause.other_retried": "{job} ({lab}) 작업이 {min_vram} GB 이상인 GPU로 재시도하려고 "
        "돌아옴 (X8)",
        "cause.other_ended": "{job} ({lab}) 작업이 끝나 {node}의 GPU {gpus}가 비었음",
        "cause.other_left": "{job} ({lab}) 작업이 실행되기 전에 대기열을 떠남",
        "cause.other_dispatched": "{job} ({lab}) 작업이 {node}의 GPU {gpus}를 가져감",
        "cause.other_reserved": "{job} ({lab}) 작업이 {node}의 GPU {gpus}를 예약함 (R1)",
        "cause.other_reservation_changed": "{job} ({lab}) 작업의 {node} 예약이 GPU {gpus}로 바뀜",
        "cause.other_released": "{job} ({lab}) 작업이 {node}의 예약을 놓음: {why}",
        "cause.other_cancelled": "{by}이(가) {job} ({lab}) 작업을 취소함",
        "cause.charged": "{job} 작업의 사용량이 {lab}에 부과됨",
        "cause.initial_usage": "{lab}의 시작 사용량이 기록됨",
        "cause.maintenance_draining": "관리자 {by}이(가) 점검을 시작함{message}: 새로 배정하지 "
        "않습니다 (M1)",
        "cause.maintenance_recovery": "점검: 사용자 작업이 끝나 LLM 백필을 회수하는 중 (M2)",
        "cause.maintenance_active": "점검 진행 중 (M3)",
        "cause.maintenance_ended": "관리자 {by}이(가) 점검을 끝냄{message}: 배정을 다시 시작합니다",
        "cause.node_changed": "노드 {node}의 GPU 상태가 바뀜 ({state}, {count}개 꺼짐)",
        "cause.backfill_ended": "{node}의 GPU {gpus}에서 LLM 백필이 멈춤 ({reason})",
        "at_once": "곧바로",
        "after": "{waited} 뒤",
        "freed_by": " ({jobs} 작업이 비움)",
        "message": ": \u201c{message}\u201d",
        "charged": " — {lab}에 {charge} TFLOP-s 부과 (현재 {usage})",
        "usage": " ({lab} 사용량: {usage} TFLOP-s)",
    },
}


def language(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """`--lang`, else JPU_LANG, else the locale; English by default."""
    env = os.environ if env is None else env
    for value in (explicit, env.get("JPU_LANG"), env.get("LC_ALL"), env.get("LC_MESSAGES"),
                  env.get("LANG")):  # fmt: skip
        if value:
            return "ko" if value.lower().startswith("ko") else "en"
    return "en"


def _n(x: float | None) -> str:
    return "?" if x is None else f"{x:,.0f}"


def _when(ts: float | None) -> str:
    return "?" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _secs(s: float) -> str:
    s = round(s)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


def _cause(t: dict[str, str], cause: Mapping[str, Any] | None) -> str:
    """The cause in words: one sentence per kind (jpu.explain.wait.CauseKind), or per kind and
    reason; never the event's type."""
    if not cause:
        return ""
    kind, reason = cause.get("kind", ""), cause.get("reason")
    if kind == "dependency_never_satisfied" and cause.get("jobs"):  # Q8: the parent, its end
        reason = "parent" if cause.get("state") else "unknown"
    template = t.get(f"cause.{kind}.{reason}") or t.get(f"cause.{kind}")
    if template is None:
        return ""
    jobs = ", ".join(cause.get("jobs") or [])
    waited = _secs(cause.get("waited_s") or 0.0)
    message = cause.get("message")
    fields = {
        "job": cause.get("job_id") or "",
        "lab": cause.get("lab") or "",
        "jobs": jobs,
        "other_lab": cause.get("other_lab") or "",
        "user": cause.get("user") or "",
        "node": cause.get("node") or "",
        "tier": cause.get("tier") or "",
        "gpus": ",".join(str(g) for g in cause.get("gpus") or []),
        "count": cause.get("count"),
        "needed": cause.get("needed"),
        "vram": cause.get("vram_gb"),
        "min_vram": cause.get("min_vram_gb"),
        "code": cause.get("code"),
        "reason": reason or "",
        "why": t.get(f"release.{reason}", reason or ""),
        "state": cause.get("state") or "",
        "by": cause.get("by") or "",
        "message": t["message"].format(message=message) if message else "",
        "waited": waited,
        "after": t["at_once"] if (cause.get("waited_s") or 0.0) < 1 else t["after"].format(
            waited=waited),
        "freed": t["freed_by"].format(jobs=jobs) if jobs else "",
    }  # fmt: skip
    text = template.format(**fields)
    if kind == "other_entered_ahead" and cause.get("lab_usage") is not None:
        text += t["usage"].format(lab=cause["lab"], usage=_n(cause["lab_usage"]))
    if cause.get("charge") is not None and cause.get("lab"):
        text += t["charged"].format(
            lab=cause["lab"], charge=_n(cause["charge"]), usage=_n(cause.get("lab_usage"))
        )
    return text


def _reason(t: dict[str, str], step: Mapping[str, Any], user: str) -> str:
    reason = step["pending_reason"]
    if not reason:
        return t["reason.none"]
    holders = ", ".join(step.get("slot_holders") or [])
    if reason == "ConcurrencyLimit" and not holders:
        reason = "ConcurrencyLimit.none"
    return t.get(f"reason.{reason}", reason).format(
        user=user, jobs=holders, min_vram=step.get("min_vram_gb")
    )


def render(wait: Mapping[str, Any], lang: str = "en") -> str:
    """The wait in sentences (pure: the API's body in, text out)."""
    t = _T.get(lang, _T["en"])
    jid = str(wait["job_id"])
    out = [
        t["head"].format(
            job=jid,
            name=wait.get("name"),
            lab=wait["lab"],
            user=wait["user"],
            state=t.get(f"state.{wait['state']}", wait["state"]),
        ),
        t["phases"].format(
            phases=" · ".join(
                f"{t.get('phase.' + k, k)} {_secs(v)}" for k, v in wait["phases"].items()
            )
        ),
        "",
        t["changes"],
    ]
    for s in wait["steps"]:
        state = t.get(f"state.{s['state']}", s["state"])
        line = f"  {_when(s['at'])}  {state}"
        if s["rank"] is not None:
            line += ", " + t["rank"].format(rank=s["rank"], n=s["queue_length"])
            line += " — " + _reason(t, s, wait["user"])
        elif s["pending_reason"]:
            line += " — " + _reason(t, s, wait["user"])
        out.append(line)
        cause = _cause(t, s.get("cause"))
        if cause:
            out.append("      " + t["because"] + cause)
        elif s.get("sampled"):
            out.append("      " + t["sampled"])
        if s["ahead"]:
            labs = ", ".join(
                t["ahead_lab"].format(
                    lab=a["lab"],
                    usage=_n(a["usage"]),
                    jobs=a["jobs"],
                    s="" if a["jobs"] == 1 else "s",
                )
                for a in s["ahead"]
            )
            out.append("      " + t["ahead"].format(labs=labs) + "; "
                       + t["own"].format(lab=wait["lab"], usage=_n(s["lab_usage"])))  # fmt: skip
    out += ["", t["reservations"]]
    if not wait["reservations"]:
        out.append("  " + t["no_reservations"])
    for r in wait["reservations"]:
        gpus = ",".join(map(str, r["gpus"]))
        line = "  " + t["res"].format(node=r["node"], tier=r["tier"], gpus=gpus,
                                      start=_when(r["started_at"]))  # fmt: skip
        if r["reason"] is None:
            line += t["res_held"]
        else:
            secs = _secs((r["ended_at"] or r["started_at"]) - r["started_at"])
            reason = t.get(f"release.{r['reason']}", r["reason"])
            line += t["res_end"].format(end=_when(r["ended_at"]), secs=secs, reason=reason)
            key = "res_cost_now" if r["charged_now"] else "res_cost_later"
            line += t[key].format(cost=_n(r["cost"]), lab=wait["lab"])
        out.append(line)
        if r.get("demoted_by"):
            out.append(
                "    "
                + t["demoted_why"].format(
                    cause=_cause(t, r["demoted_by"]),
                    first=r.get("overtaken_by"),
                    first_lab=r.get("overtaken_by_lab"),
                    first_usage=_n(r.get("overtaken_by_usage")),
                )
            )
    out += ["", t["note"]]
    return "\n".join(out)


def register(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    rest.add_target_options(common, defaults=False)
    p = sub.add_parser(
        "why", parents=[common], help="why a job waited (rank, reason, reservations)"
    )
    p.add_argument("job_id", metavar="JOB")
    p.add_argument(
        "--lang", choices=("en", "ko"), help="language (default: JPU_LANG or the locale)"
    )
    p.set_defaults(func=cmd_why)


def cmd_why(args: argparse.Namespace) -> int:
    with RestClient(resolve_target(args.url, args.token)) as c:
        wait = c.get(f"/v1/jobs/{quote(args.job_id, safe='')}/wait")
    if args.json:
        print(json.dumps(wait, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        print(render(wait, language(args.lang)))
    return 0

"""`jpu why JOB`: why a job waited, in words a lab member understands (SPEC U4; issue 14 item 3).

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

from jpu.cli import rest
from jpu.cli.rest_client import RestClient, resolve_target

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
        "reason.ConcurrencyLimit": "all of the user's slots are in use (S1)",
        "reason.Dependency": "it waits for the jobs it depends on, holding no slot (Q8)",
        "reason.Held": "it is held: `jpu release ID` lets it run (Q9)",
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
        "cause.own.JobSubmitted": "it was submitted",
        "cause.own.JobPromoted": "it entered the global queue",
        "cause.own.ReservationStarted": "it started a reservation",
        "cause.own.ReservationGrown": "its reservation took another GPU",
        "cause.own.ReservationReleased": "its reservation was released",
        "cause.own.JobDispatched": "it was dispatched",
        "cause.own.JobStarted": "it started",
        "cause.own.JobHeld": "it was held (Q9)",
        "cause.own.JobReleased": "it was released (Q9)",
        "cause.own.JobEnded": "it ended",
        "cause.own.JobRetryScheduled": "it is retried on a GPU with more memory (X8)",
        "cause.JobEnded": "{job} ({lab}) ended",
        "cause.JobPromoted": "{job} ({lab}) entered the global queue",
        "cause.JobDispatched": "{job} ({lab}) was dispatched",
        "cause.ReservationStarted": "{job} ({lab}) started a reservation",
        "cause.ReservationReleased": "{job} ({lab}) released its reservation",
        "cause.UsageCharged": "{lab} was charged",
        "cause.MaintenanceChanged": "maintenance changed",
        "cause.NodeInventoryObserved": "the GPU inventory changed",
        "cause.other": "{event} ({job})",
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
        "reason.ConcurrencyLimit": "사용자의 동시 실행 한도를 모두 쓰고 있습니다 (S1)",
        "reason.Dependency": "의존하는 작업을 기다립니다 — 슬롯은 차지하지 않습니다 (Q8)",
        "reason.Held": "보류되어 있습니다: `jpu release ID`로 풀 수 있습니다 (Q9)",
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
        "cause.own.JobSubmitted": "제출됨",
        "cause.own.JobPromoted": "전역 대기열에 들어감",
        "cause.own.ReservationStarted": "예약을 시작함",
        "cause.own.ReservationGrown": "예약에 GPU가 더해짐",
        "cause.own.ReservationReleased": "예약이 해제됨",
        "cause.own.JobDispatched": "배정됨",
        "cause.own.JobStarted": "시작됨",
        "cause.own.JobHeld": "보류됨 (Q9)",
        "cause.own.JobReleased": "보류가 풀림 (Q9)",
        "cause.own.JobEnded": "끝남",
        "cause.own.JobRetryScheduled": "메모리가 더 큰 GPU로 재시도 (X8)",
        "cause.JobEnded": "{job} ({lab}) 작업이 끝남",
        "cause.JobPromoted": "{job} ({lab}) 작업이 전역 대기열에 들어옴",
        "cause.JobDispatched": "{job} ({lab}) 작업이 배정됨",
        "cause.ReservationStarted": "{job} ({lab}) 작업이 예약을 시작함",
        "cause.ReservationReleased": "{job} ({lab}) 작업의 예약이 해제됨",
        "cause.UsageCharged": "{lab}에 사용량이 부과됨",
        "cause.MaintenanceChanged": "점검 상태가 바뀜",
        "cause.NodeInventoryObserved": "GPU 구성이 바뀜",
        "cause.other": "{event} ({job})",
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


def _cause(t: dict[str, str], cause: Mapping[str, Any] | None, job_id: str) -> str:
    if not cause:
        return ""
    event, other = cause.get("event", ""), cause.get("job_id")
    fields = {"job": other or "", "lab": cause.get("lab") or "", "event": event}
    if other == job_id and f"cause.own.{event}" in t:
        text = t[f"cause.own.{event}"]
    else:
        text = t.get(f"cause.{event}", t["cause.other"]).format(**fields)
    if event == "JobPromoted" and other != job_id and cause.get("lab_usage") is not None:
        text += t["usage"].format(lab=cause["lab"], usage=_n(cause["lab_usage"]))
    if cause.get("charge") is not None and cause.get("lab"):
        text += t["charged"].format(
            lab=cause["lab"], charge=_n(cause["charge"]), usage=_n(cause.get("lab_usage"))
        )
    return text


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
            reason = s["pending_reason"]
            line += " — " + t[f"reason.{reason}" if reason else "reason.none"]
        elif s["pending_reason"]:
            line += " — " + t.get(f"reason.{s['pending_reason']}", s["pending_reason"])
        out.append(line)
        cause = _cause(t, s.get("cause"), jid)
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
                    cause=_cause(t, r["demoted_by"], jid),
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

// JPU-Share web console (SPEC U2). Vanilla JS, no build step; talks only to the REST API (/v1).
// The token the user types is kept in localStorage and sent as `Authorization: Bearer <token>`.
// All text reaches the page through textContent / DOM nodes, never innerHTML (no HTML injection).
"use strict";

const STRINGS = {
  en: {
    "nav.queue": "Queue", "nav.pool": "GPU pool", "nav.labs": "Lab usage", "nav.jobs": "Jobs",
    "nav.submit": "Submit", "token.placeholder": "API token", "token.save": "Save",
    "nav.workspaces": "Workspaces", "ws.title": "Workspaces", "ws.empty": "No workspaces. Build one with `jpu workspace build NAME -r requirements.txt`.",
    "ws.scope": "Scope", "ws.owner": "Owner", "ws.reason": "Reason", "ws.size": "Size", "ws.created": "Created",
    "ws.log": "Build log of {name}", "ws.nolog": "(no build log yet: it is building)",
    "ws.default": "Your default workspace (a job that names none runs in it)", "ws.default_none": "none (the base image)",
    "ws.default_clear": "Clear default", "ws.make_default": "Make default", "ws.is_default": "default",
    "token.missing": "Type your API token (top right) to see the cluster.",
    "token.rejected": "This API token was not accepted: it is mistyped, revoked or expired. Paste a valid one top right (it starts as you received it, e.g. demo-bcg-alice); an admin creates tokens with `jpu-admin token create USER`.",
    "submit.env_bad": "Environment line {n} (\"{line}\") has no \"=\": write KEY=VALUE, one per line. Nothing was submitted.",
    "submit.time_bad": "Time limit \"{value}\" is not a time: use minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]] as with sbatch --time (e.g. 90, 1:30:00, 2-00:00:00). Nothing was submitted.",
    "submit.time_zero": "Time limit \"{value}\" must be positive. Nothing was submitted.",
    "submit.time_none": "no time limit",
    "submit.time_placeholder": "e.g. 1:30:00, 2-00:00:00, 90 (minutes); empty = none",
    "queue.title": "Global queue", "queue.empty": "The queue is empty.",
    "running.title": "Running now", "running.empty": "No job holds a GPU.",
    "pool.title": "GPU pool by placement", "labs.title": "Lab usage (decayed)",
    "jobs.title": "Jobs", "jobs.id": "job id", "jobs.open": "Open", "jobs.empty": "No jobs.",
    "job.title": "Job", "job.cancel": "Cancel job", "job.timeline": "Event timeline",
    "job.cancel_sent": "Cancellation requested.",
    "submit.title": "Submit a job", "submit.name": "Name", "submit.gpus": "GPUs",
    "submit.tiers": "Tiers (comma separated, empty = any)", "submit.time": "Time limit (as sbatch --time)",
    "submit.command": "Command (shell script)", "submit.env": "Environment (KEY=VALUE per line)",
    "submit.chdir": "Working directory (as sbatch --chdir)",
    "submit.chdir_placeholder": "an absolute path, e.g. /home/you/project; empty = the default",
    "submit.go": "Submit", "submit.ok": "Submitted job",
    "col.rank": "Rank", "col.job": "Job", "col.lab": "Lab", "col.user": "User", "col.gpus": "GPUs",
    "col.state": "State", "col.lab_usage": "Lab usage, charged (TFLOP-s)", "col.reason": "Pending reason",
    "col.lab_accrued": "Accrued, not yet charged", "col.usage_now": "Usage now, charged", "col.raw": "Raw value", "col.as_of": "As of",
    "col.running": "Running", "col.queued": "Queued", "col.name": "Name", "col.attempt": "Attempt",
    "col.eta": "Estimated start", "col.placement": "Placement", "col.elapsed": "Run time",
    "col.time_limit": "Time limit",
    "gpu.idle": "idle", "gpu.running": "running", "gpu.reserved": "reserved",
    "gpu.running_lab": "running (filled with its lab's colour)",
    "gpu.reserved_lab": "reserved (framed in its lab's colour)",
    "gpu.backfill": "LLM backfill", "gpu.down": "down", "gpu.labs": "Labs:",
    "pool.capacity": "capacity", "pool.idle": "idle", "pool.gpu": "GPU",
    "maint.DRAINING": "Maintenance: draining. New submissions are refused; running jobs finish.",
    "maint.BACKFILL_RECOVERY": "Maintenance: reclaiming LLM backfill GPUs.",
    "maint.ACTIVE": "Maintenance in progress. Submissions are refused until it ends.",
    "maint.since": "since",
    "chart.empty": "No usage recorded yet.", "chart.1h": "1 h", "chart.24h": "24 h", "chart.7d": "7 d", "chart.30d": "30 d",
    "chart.window": "Window",
    "f.state": "State", "f.attempt": "Attempt", "f.user": "User", "f.lab": "Lab",
    "f.num_gpus": "GPUs", "f.rank": "Rank", "f.pending_reason": "Pending reason",
    "f.placement": "Placement", "f.reservation": "Reservation", "f.usage_charged": "Usage charged",
    "f.backend_job_id": "Slurm job id", "f.isolation": "Isolation", "f.exit_code": "Exit code",
    "f.reason": "End reason", "f.submitted_at": "Submitted", "f.queue_entered_at": "Entered queue",
    "f.ended_at": "Ended", "f.tiers": "Tiers", "f.min_vram_gb": "Min VRAM (GB)",
    "f.command": "Command", "f.workdir": "Working directory", "f.account": "Runs as Unix account",
    "f.time_limit_s": "Time limit", "f.elapsed_s": "Run time",
    "f.estimated_start": "Estimated start (an estimate, not a promise)",
    "est.limits": "from time limits", "est.predicted": "from predicted run times",
    "est.unknown": "unknown", "est.at": "estimated at",
    "f.oom_retry": "OOM retry", "f.raised_by_oom": "raised by the OOM retry, not set by you",
    "f.sbatch_warning": "sbatch warning",
    "f.dependency": "Depends on", "f.states": "Tasks by state", "f.tasks": "Tasks",
    "f.array_id": "Task of array", "f.held": "Held",
    "jobs.expand": "Show the array's tasks", "jobs.collapse": "Hide the array's tasks",
    "dep.unknown": "not visible to you, or no longer known",
    "job.output": "Output", "log.attempt": "Attempt", "log.none": "No output yet for this attempt.",
    "log.running": "Updating while the attempt runs…", "log.ended": "The attempt has ended.",
    "log.truncated": "Showing the last part only; `jpu logs ID` prints all of it.",
    // the event timeline: one sentence per event (SPEC U2), durations after "·"
    "ev.raw": "raw event", "ev.gpus": "{n} GPU", "ev.gpus_n": "{n} GPUs",
    "ev.JobSubmitted": "Submitted by {user} ({lab}) as “{name}”: {gpus}{tiers}{limit}",
    "ev.tiers": ", tiers {tiers}", "ev.limit": ", time limit {limit}",
    "ev.JobPromoted": "Entered the global queue",
    "ev.JobPromoted.d": "after {d} in the personal queue",
    "ev.ReservationStarted": "Reserved {gpus} on {node} ({tier})",
    "ev.ReservationStarted.d": "after {d} in the queue",
    "ev.ReservationGrown": "Reservation grew to {gpus} on {node} ({tier})",
    "ev.ReservationGrown.d": "{d} after the reservation started",
    "ev.ReservationShrunk": "Reservation on {node} ({tier}) lost GPU {removed}; {gpus} still held",
    "ev.ReservationReleased": "Released the reservation of {gpus} on {node} ({tier}): {why}",
    "ev.ReservationReleased.d": "held for {d}",
    "rel.dispatched": "the job starts on these GPUs",
    "rel.swap": "the job starts on another placement (charged with its run, R4)",
    "rel.demoted": "the job is no longer rank 1 (charged to the lab now, R3)",
    "rel.cancelled": "the job was cancelled",
    "rel.maintenance": "maintenance (charged to the lab now)",
    "rel.capacity": "the placement lost GPUs (charged to the lab now)",
    "ev.JobDispatched": "Attempt {attempt} dispatched to {node} ({tier}), GPU {list}",
    "ev.JobDispatched.d": "after {d} in the queue",
    "ev.JobStarted": "Attempt {attempt} started (backend job {backend}, isolation {isolation})",
    "ev.JobStarted.d": "{d} after the dispatch",
    "ev.JobEnded": "Attempt {attempt} ended: {state}{exit}{reason}{usage}",
    "ev.exit": ", exit code {code}", "ev.reason": " — {reason}", "ev.usage": "; {usage} TFLOP-s charged",
    "ev.JobEnded.d": "ran for {d}", "ev.JobEnded.held": "held the GPUs for {d} without starting",
    "ev.JobRetryScheduled": "Attempt {attempt} ran out of GPU memory: back to the queue, to retry as attempt {next} on a GPU with at least {vram} GB",
    "ev.JobRetryDeclined": "No retry after attempt {attempt}: {why}",
    "ev.JobRetryDeclined.max_attempts": "it used up its attempts",
    "ev.JobRetryDeclined.no_fit": "no GPU here has the {vram} GB it would need",
    "ev.JobCancelRequested": "Cancellation requested by {by}",
    "ev.other": "{type}",
    "dur.lt1": "< 1 s", "dur.s": "{s} s", "dur.m": "{m} min", "dur.ms": "{m} min {s} s",
    "dur.h": "{h} h", "dur.hm": "{h} h {m} min", "dur.d": "{d} d", "dur.dh": "{d} d {h} h",
    // API errors (SPEC §8 codes): a headline per code, the server's own message beneath
    "err.VALIDATION_ERROR": "The request was refused: a value is not valid.",
    "err.NO_FIT_PLACEMENT": "No placement of this cluster can run this job as asked.",
    "err.SERVICE_MAINTENANCE": "Maintenance: submissions are refused until it ends.",
    "err.UNAUTHENTICATED": "Not signed in: the API token is missing or was not accepted.",
    "err.FORBIDDEN": "Not allowed: only the job's owner, a lab admin of its lab or an admin may see or change it.",
    "err.NOT_FOUND": "Not found: there is no such job (or item).",
    "err.ALREADY_TERMINAL": "The job has already ended; there is nothing to cancel.",
    "err.IDEMPOTENCY_CONFLICT": "This submission key was already used for a different job.",
    "err.RATE_LIMITED": "Too many submissions: wait a moment and try again.",
    "err.SERVICE_UNAVAILABLE": "A service is not answering right now; try again in a few seconds.",
    "err.INTAKE_UNAVAILABLE": "The job intake is not answering right now; try again in a few seconds.",
    "err.REQUEST_TIMEOUT": "The request took too long and was cut off; try again.",
    "err.BAD_REQUEST": "The request is malformed.", "err.CONFLICT": "The request conflicts with the job's state.",
    "err.METHOD_NOT_ALLOWED": "This request is not allowed here.",
    "err.INTERNAL": "Internal error in the gateway; please tell an admin.",
    "err.OUTPUT_UNREADABLE": "The gateway cannot read the job's output.",
    "err.NOT_READY": "Not ready yet; try again in a moment.",
    "err.NETWORK": "The gateway did not answer (network error); retrying.",
    "err.HTTP": "The gateway answered HTTP {status}.",
    // what the error's details add: the fix (as the CLI's jpu.cli.messages does)
    "fix.no_fit": "The largest placement that can run it has {gpus} ({tier} on {node}; a job runs inside one placement): ask for {n} or fewer.",
    "fix.maintenance": "The admin says: {message}", "fix.rate": "Retry in {s} s.",
    "fix.field": "Field: {field}",
    // what states and pending reasons mean (tooltips; English shows the codes themselves)
    "state.PERSONAL_QUEUE_WAIT.t": "in your personal queue: you are at your running-jobs limit (Q4)",
    "state.GLOBAL_QUEUE_WAIT.t": "waiting in the global queue for GPUs",
    "state.RESERVING.t": "rank 1, holding GPUs while waiting for more (R1)",
    "state.DISPATCHED.t": "sent to a GPU node, starting", "state.RUNNING.t": "running",
    "state.CANCELLING.t": "being stopped", "state.COMPLETED.t": "ended, exit code 0",
    "state.FAILED.t": "ended with an error", "state.CANCELLED.t": "cancelled",
    "reason.Priority.t": "a higher-ranked job takes the resources",
    "reason.Resources.t": "no placement that fits has enough idle GPUs",
    "reason.MinVram.t": "waits for GPUs with enough memory (its VRAM floor, raised after an out-of-memory retry): only smaller GPUs are idle",
    "reason.Reservation.t": "holding a reservation, waiting for more GPUs",
    "reason.Maintenance.t": "maintenance: nothing starts until it ends",
    "reason.ConcurrencyLimit.t": "personal queue: at the running-jobs limit",
    "reason.ArrayThrottle.t": "personal queue: its array already runs as many tasks as its %N allows",
    // F5: a lab's charges (GET /v1/labs/{lab}/usage/explain)
    "charges.mine": "Why my lab was charged", "charges.title": "Charges of lab",
    "charges.summary": "Usage now {usage} TFLOP-s = the sum of every charge below, each decayed since it was charged (half-life {hl}).",
    "charges.empty": "No charge yet.",
    "charges.forbidden": "Only members of {lab} and admins may see its charges. Yours: Lab usage → \"Why my lab was charged\" ({mine}).",
    "charges.run": "its run", "charges.run_res": "its run + reservation held before it (R4)",
    "charges.reservation": "reservation, charged at release ({rule})", "charges.initial": "starting usage",
    "col.charged_at": "Charged at", "col.kind": "For", "col.held": "GPU time held",
    "col.charged": "Charged (TFLOP-s)", "col.decay": "Decay since", "col.counts_now": "Counts now (TFLOP-s)",
  },
  ko: {
    "nav.queue": "대기열", "nav.pool": "GPU 풀", "nav.labs": "연구실 사용량", "nav.jobs": "작업",
    "nav.submit": "제출", "token.placeholder": "API 토큰", "token.save": "저장",
    "nav.workspaces": "작업 환경", "ws.title": "작업 환경", "ws.empty": "작업 환경이 없습니다. `jpu workspace build NAME -r requirements.txt`로 만드세요.",
    "ws.scope": "범위", "ws.owner": "소유자", "ws.reason": "사유", "ws.size": "크기", "ws.created": "생성 시각",
    "ws.log": "{name}의 빌드 로그", "ws.nolog": "(아직 빌드 로그가 없습니다: 빌드 중입니다)",
    "ws.default": "기본 작업 환경 (작업 환경을 지정하지 않은 작업이 여기서 실행됩니다)", "ws.default_none": "없음 (기본 이미지)",
    "ws.default_clear": "기본값 해제", "ws.make_default": "기본값으로", "ws.is_default": "기본값",
    "token.missing": "오른쪽 위에 API 토큰을 입력하면 클러스터 현황을 볼 수 있습니다.",
    "token.rejected": "이 API 토큰은 받아들여지지 않았습니다: 잘못 입력했거나 폐기되었거나 만료되었습니다. 오른쪽 위에 올바른 토큰을 붙여 넣으세요 (받은 그대로, 예: demo-bcg-alice). 관리자는 `jpu-admin token create USER`로 토큰을 만듭니다.",
    "submit.env_bad": "환경 변수 {n}번째 줄(\"{line}\")에 \"=\"가 없습니다: 한 줄에 KEY=VALUE로 쓰세요. 아무것도 제출하지 않았습니다.",
    "submit.time_bad": "시간 제한 \"{value}\"은(는) 올바른 시간이 아닙니다: sbatch --time처럼 분, MM:SS, HH:MM:SS 또는 D-HH[:MM[:SS]]로 쓰세요 (예: 90, 1:30:00, 2-00:00:00). 아무것도 제출하지 않았습니다.",
    "submit.time_zero": "시간 제한 \"{value}\"은(는) 0보다 커야 합니다. 아무것도 제출하지 않았습니다.",
    "submit.time_none": "시간 제한 없음",
    "submit.time_placeholder": "예: 1:30:00, 2-00:00:00, 90 (분); 비우면 제한 없음",
    "queue.title": "전역 대기열", "queue.empty": "대기 중인 작업이 없습니다.",
    "running.title": "실행 중인 작업", "running.empty": "GPU를 쓰고 있는 작업이 없습니다.",
    "pool.title": "배치(placement)별 GPU 풀", "labs.title": "연구실 사용량 (반감기 적용)",
    "jobs.title": "작업", "jobs.id": "작업 ID", "jobs.open": "열기", "jobs.empty": "작업이 없습니다.",
    "job.title": "작업", "job.cancel": "작업 취소", "job.timeline": "이벤트 타임라인",
    "job.cancel_sent": "취소를 요청했습니다.",
    "submit.title": "작업 제출", "submit.name": "이름", "submit.gpus": "GPU 수",
    "submit.tiers": "티어 (쉼표로 구분, 비우면 전체)", "submit.time": "시간 제한 (sbatch --time 형식)",
    "submit.command": "명령 (셸 스크립트)", "submit.env": "환경 변수 (한 줄에 KEY=VALUE)",
    "submit.chdir": "작업 디렉터리 (sbatch --chdir 형식)",
    "submit.chdir_placeholder": "절대 경로, 예: /home/you/project; 비우면 기본값",
    "submit.go": "제출", "submit.ok": "제출된 작업",
    "col.rank": "순위", "col.job": "작업", "col.lab": "연구실", "col.user": "사용자",
    "col.gpus": "GPU", "col.state": "상태", "col.lab_usage": "연구실 사용량, 부과됨 (TFLOP-s)",
    "col.lab_accrued": "누적, 아직 부과 안 됨", "col.reason": "대기 사유", "col.usage_now": "현재 사용량, 부과됨", "col.raw": "기록값",
    "col.as_of": "기준 시각", "col.running": "실행 중", "col.queued": "대기 중",
    "col.name": "이름", "col.attempt": "시도", "col.eta": "예상 시작 시각", "col.placement": "배치",
    "col.elapsed": "실행 시간", "col.time_limit": "시간 제한",
    "gpu.idle": "유휴", "gpu.running": "실행 중", "gpu.reserved": "예약됨",
    "gpu.running_lab": "실행 중 (연구실 색으로 채움)", "gpu.reserved_lab": "예약됨 (연구실 색 테두리)",
    "gpu.backfill": "LLM backfill", "gpu.down": "중단", "gpu.labs": "연구실:",
    "pool.capacity": "용량", "pool.idle": "유휴", "pool.gpu": "GPU",
    "maint.DRAINING": "점검 모드: 드레이닝 중. 새 작업 제출이 차단되며 실행 중인 작업은 정상 완료됩니다.",
    "maint.BACKFILL_RECOVERY": "점검 모드: LLM backfill GPU를 회수하고 있습니다.",
    "maint.ACTIVE": "점검 진행 중입니다. 점검이 끝날 때까지 작업 제출이 차단됩니다.",
    "maint.since": "시작",
    "chart.empty": "아직 기록된 사용량이 없습니다.", "chart.1h": "1시간", "chart.24h": "24시간", "chart.7d": "7일", "chart.30d": "30일",
    "chart.window": "기간",
    "f.state": "상태", "f.attempt": "시도", "f.user": "사용자", "f.lab": "연구실",
    "f.num_gpus": "GPU 수", "f.rank": "순위", "f.pending_reason": "대기 사유",
    "f.placement": "배치", "f.reservation": "예약", "f.usage_charged": "부과된 사용량",
    "f.backend_job_id": "Slurm 작업 ID", "f.isolation": "격리", "f.exit_code": "종료 코드",
    "f.reason": "종료 사유", "f.submitted_at": "제출 시각", "f.queue_entered_at": "대기열 진입",
    "f.ended_at": "종료 시각", "f.tiers": "티어", "f.min_vram_gb": "최소 VRAM (GB)",
    "f.command": "명령", "f.workdir": "작업 디렉터리", "f.account": "실행 Unix 계정",
    "f.time_limit_s": "시간 제한", "f.elapsed_s": "실행 시간",
    "f.estimated_start": "예상 시작 시각 (추정치이며 약속이 아닙니다)",
    "est.limits": "시간 제한 기준", "est.predicted": "예측 실행 시간 기준",
    "est.unknown": "알 수 없음", "est.at": "추정 시각",
    "f.oom_retry": "OOM 재시도", "f.raised_by_oom": "OOM 재시도로 올라간 값이며 사용자가 정한 값이 아닙니다",
    "f.sbatch_warning": "sbatch 경고",
    "f.dependency": "의존 대상", "f.states": "상태별 작업 수", "f.tasks": "작업",
    "f.array_id": "배열의 작업", "f.held": "보류",
    "jobs.expand": "배열의 작업 보기", "jobs.collapse": "배열의 작업 숨기기",
    "dep.unknown": "볼 수 없거나 더 이상 알 수 없는 작업",
    "job.output": "출력", "log.attempt": "시도", "log.none": "이 시도의 출력이 아직 없습니다.",
    "log.running": "실행 중인 동안 자동으로 갱신됩니다…", "log.ended": "이 시도는 끝났습니다.",
    "log.truncated": "마지막 부분만 표시합니다. 전체는 `jpu logs ID`로 볼 수 있습니다.",
    "ev.raw": "원본 이벤트", "ev.gpus": "GPU {n}개", "ev.gpus_n": "GPU {n}개",
    "ev.JobSubmitted": "{user} ({lab})이(가) “{name}”(으)로 제출: {gpus}{tiers}{limit}",
    "ev.tiers": ", 티어 {tiers}", "ev.limit": ", 시간 제한 {limit}",
    "ev.JobPromoted": "전역 대기열에 들어감",
    "ev.JobPromoted.d": "개인 대기열에서 {d} 기다린 뒤",
    "ev.ReservationStarted": "{node} ({tier})의 {gpus} 예약",
    "ev.ReservationStarted.d": "대기열에서 {d} 기다린 뒤",
    "ev.ReservationGrown": "{node} ({tier})의 예약이 {gpus}(으)로 늘어남",
    "ev.ReservationGrown.d": "예약 시작 후 {d}",
    "ev.ReservationShrunk": "{node} ({tier})의 예약에서 GPU {removed}을(를) 잃음; {gpus} 유지",
    "ev.ReservationReleased": "{node} ({tier})의 {gpus} 예약 해제: {why}",
    "ev.ReservationReleased.d": "{d} 동안 보유",
    "rel.dispatched": "이 GPU에서 작업이 시작됨",
    "rel.swap": "작업이 다른 배치에서 시작됨 (실행과 함께 부과, R4)",
    "rel.demoted": "작업이 더 이상 1순위가 아님 (지금 연구실에 부과, R3)",
    "rel.cancelled": "작업이 취소됨",
    "rel.maintenance": "점검 (지금 연구실에 부과)",
    "rel.capacity": "배치의 GPU가 줄어듦 (지금 연구실에 부과)",
    "ev.JobDispatched": "시도 {attempt}을(를) {node} ({tier})의 GPU {list}에 배정",
    "ev.JobDispatched.d": "대기열에서 {d} 기다린 뒤",
    "ev.JobStarted": "시도 {attempt} 시작 (백엔드 작업 {backend}, 격리 {isolation})",
    "ev.JobStarted.d": "배정 후 {d}",
    "ev.JobEnded": "시도 {attempt} 종료: {state}{exit}{reason}{usage}",
    "ev.exit": ", 종료 코드 {code}", "ev.reason": " — {reason}", "ev.usage": "; {usage} TFLOP-s 부과",
    "ev.JobEnded.d": "{d} 동안 실행", "ev.JobEnded.held": "시작하지 못한 채 {d} 동안 GPU 보유",
    "ev.JobRetryScheduled": "시도 {attempt}에서 GPU 메모리 부족: 대기열로 돌아가 {vram} GB 이상의 GPU에서 시도 {next}(으)로 다시 시도",
    "ev.JobRetryDeclined": "시도 {attempt} 이후 재시도하지 않음: {why}",
    "ev.JobRetryDeclined.max_attempts": "시도 횟수를 모두 썼음",
    "ev.JobRetryDeclined.no_fit": "필요한 {vram} GB를 가진 GPU가 여기에는 없음",
    "ev.JobCancelRequested": "{by}이(가) 취소를 요청",
    "dur.lt1": "1초 미만", "dur.s": "{s}초", "dur.m": "{m}분", "dur.ms": "{m}분 {s}초",
    "dur.h": "{h}시간", "dur.hm": "{h}시간 {m}분", "dur.d": "{d}일", "dur.dh": "{d}일 {h}시간",
    "err.VALIDATION_ERROR": "요청이 거부되었습니다: 올바르지 않은 값이 있습니다.",
    "err.NO_FIT_PLACEMENT": "이 클러스터의 어떤 배치(placement)로도 요청한 대로 실행할 수 없습니다.",
    "err.SERVICE_MAINTENANCE": "점검 중입니다: 점검이 끝날 때까지 작업 제출이 차단됩니다.",
    "err.UNAUTHENTICATED": "로그인되지 않았습니다: API 토큰이 없거나 받아들여지지 않았습니다.",
    "err.FORBIDDEN": "권한이 없습니다: 작업 소유자, 해당 연구실 관리자, 관리자만 보거나 바꿀 수 있습니다.",
    "err.NOT_FOUND": "찾을 수 없습니다: 그런 작업(또는 항목)이 없습니다.",
    "err.ALREADY_TERMINAL": "이미 끝난 작업이라 취소할 것이 없습니다.",
    "err.IDEMPOTENCY_CONFLICT": "이 제출 키(Idempotency-Key)는 이미 다른 작업에 쓰였습니다.",
    "err.RATE_LIMITED": "제출이 너무 잦습니다: 잠시 후 다시 시도하세요.",
    "err.SERVICE_UNAVAILABLE": "서비스가 지금 응답하지 않습니다: 몇 초 뒤 다시 시도하세요.",
    "err.INTAKE_UNAVAILABLE": "작업 접수 서비스가 지금 응답하지 않습니다: 몇 초 뒤 다시 시도하세요.",
    "err.REQUEST_TIMEOUT": "요청 시간이 초과되어 끊겼습니다: 다시 시도하세요.",
    "err.BAD_REQUEST": "요청 형식이 잘못되었습니다.", "err.CONFLICT": "요청이 작업의 현재 상태와 충돌합니다.",
    "err.METHOD_NOT_ALLOWED": "여기서는 허용되지 않는 요청입니다.",
    "err.INTERNAL": "게이트웨이 내부 오류입니다: 관리자에게 알려 주세요.",
    "err.OUTPUT_UNREADABLE": "게이트웨이가 작업 출력을 읽을 수 없습니다.",
    "err.NOT_READY": "아직 준비되지 않았습니다: 잠시 후 다시 시도하세요.",
    "err.NETWORK": "게이트웨이가 응답하지 않습니다 (네트워크 오류). 다시 시도하는 중입니다.",
    "err.HTTP": "게이트웨이가 HTTP {status}(으)로 응답했습니다.",
    "fix.no_fit": "이 작업을 실행할 수 있는 가장 큰 배치는 {gpus}입니다 ({node}의 {tier}; 작업은 한 배치 안에서만 실행됩니다): {n}개 이하로 요청하세요.",
    "fix.maintenance": "관리자 메시지: {message}", "fix.rate": "{s}초 뒤 다시 시도하세요.",
    "fix.field": "항목: {field}",
    "state.PERSONAL_QUEUE_WAIT": "개인 대기열", "state.GLOBAL_QUEUE_WAIT": "전역 대기열 대기",
    "state.RESERVING": "GPU 예약 중", "state.DISPATCHED": "배정됨", "state.RUNNING": "실행 중",
    "state.CANCELLING": "취소 중", "state.COMPLETED": "완료", "state.FAILED": "실패",
    "state.CANCELLED": "취소됨",
    "state.PERSONAL_QUEUE_WAIT.t": "개인 대기열: 동시에 실행할 수 있는 작업 수 한도에 도달했습니다 (Q4)",
    "state.GLOBAL_QUEUE_WAIT.t": "전역 대기열에서 GPU를 기다리는 중",
    "state.RESERVING.t": "1순위로서 GPU를 더 기다리며 일부를 예약해 두는 중 (R1)",
    "state.DISPATCHED.t": "GPU 노드로 보내져 시작하는 중", "state.RUNNING.t": "실행 중",
    "state.CANCELLING.t": "중지하는 중", "state.COMPLETED.t": "종료 코드 0으로 끝남",
    "state.FAILED.t": "오류로 끝남", "state.CANCELLED.t": "취소됨",
    "reason.Priority": "우선순위 밀림", "reason.Resources": "자원 부족",
    "reason.Reservation": "예약 후 대기", "reason.Maintenance": "점검 중", "reason.MinVram": "VRAM 부족",
    "reason.ConcurrencyLimit": "동시 실행 한도", "reason.ArrayThrottle": "배열 동시 실행 한도",
    "reason.Priority.t": "더 높은 순위의 작업이 자원을 가져갑니다",
    "reason.Resources.t": "맞는 배치 중 유휴 GPU가 충분한 곳이 없습니다",
    "reason.MinVram.t": "메모리가 충분한 GPU를 기다립니다 (메모리 부족 재시도로 높아진 최소 VRAM): 더 작은 GPU만 비어 있습니다",
    "reason.Reservation.t": "예약을 잡고 GPU가 더 비기를 기다립니다",
    "reason.Maintenance.t": "점검 중: 끝날 때까지 아무것도 시작하지 않습니다",
    "reason.ConcurrencyLimit.t": "개인 대기열: 동시 실행 작업 수 한도",
    "reason.ArrayThrottle.t": "개인 대기열: 배열이 %N 만큼의 작업을 이미 실행 중입니다",
    "end.OOM": "GPU 메모리 부족", "end.HOST_OOM": "호스트 메모리 부족",
    "end.NonZeroExitCode": "0이 아닌 종료 코드", "end.TIMEOUT": "시간 제한 초과",
    "end.NODE_FAIL": "노드 장애", "end.PREEMPTED": "선점됨", "end.cancelled": "취소됨",
    "end.kill_failed": "취소됨 (프로세스 종료 실패)",
    "end.DEPENDENCY_NEVER_SATISFIED": "의존 조건을 결코 만족할 수 없음",
    "charges.mine": "우리 연구실에 부과된 이유", "charges.title": "연구실 부과 내역",
    "charges.summary": "현재 사용량 {usage} TFLOP-s = 아래 모든 부과액을 부과 시점부터 반감기({hl})로 감쇠한 합.",
    "charges.empty": "아직 부과된 것이 없습니다.",
    "charges.forbidden": "{lab} 연구실의 부과 내역은 그 연구실 구성원과 관리자만 볼 수 있습니다. 내 연구실({mine}): 연구실 사용량 → \"우리 연구실에 부과된 이유\".",
    "charges.run": "실행", "charges.run_res": "실행 + 그 전에 잡은 예약 (R4)",
    "charges.reservation": "예약, 해제 시 부과 ({rule})", "charges.initial": "시작 사용량",
    "col.charged_at": "부과 시각", "col.kind": "내역", "col.held": "GPU 점유 시간",
    "col.charged": "부과액 (TFLOP-s)", "col.decay": "감쇠", "col.counts_now": "현재 반영 (TFLOP-s)",
  },
};

const POLL_MS = 3000, LOG_POLL_MS = 2000;  // live updates while the page is visible
const CHART_WINDOWS = [1, 24, 168, 720];  // hours: 1 h / 24 h / 7 d / 30 d

const state = {
  lang: localStorage.getItem("jpu.lang") || ((navigator.language || "").startsWith("ko") ? "ko" : "en"),
  token: localStorage.getItem("jpu.token") || "",
  nav: 0,          // request token: answers of an older render are dropped (never a stale view)
  viewKey: null,   // the view (and job) on screen: another one means a navigation
  busy: 0,         // the token of a render in flight: a poll waits for the next tick
  timers: null,    // the poll timers, stopped while the page is hidden
  error: null,     // the error shown (re-rendered in the other language on the toggle)
  chartHours: 24,  // the usage chart's window
  labs: [],        // lab names (sorted): the index gives the lab's colour
  labsAt: 0,
  log: null,       // the log pane of the job page (see refreshLog)
  me: null,        // GET /v1/me: the caller's lab (their charges) and role
  files: null,     // the files pane of the job page (files.js)
  openArrays: new Set(),  // arrays shown with their tasks in the jobs view (Q7)
};
const $ = (id) => document.getElementById(id);
const t = (key) => (STRINGS[state.lang] || STRINGS.en)[key] ?? STRINGS.en[key] ?? key;
const has = (key) => key in (STRINGS[state.lang] || {}) || key in STRINGS.en;
const fill = (text, params) => text.replace(/\{(\w+)\}/g, (m, k) => (k in (params || {}) ? String(params[k]) : m));
const tf = (key, params) => fill(t(key), params);

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") el.className = v; else if (k === "href") el.href = v;
    else if (k === "style") Object.assign(el.style, v); else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// Replace `el`'s children only when what they show changed (`sig`): a poll then leaves the
// page alone — an open raw event, a selection, a scrolled table stay as they are.
function setRows(el, sig, build) {
  const s = state.lang + "\u0000" + sig;
  if (el.dataset.sig === s) return;
  el.dataset.sig = s;
  el.replaceChildren(...build().filter((c) => c !== null && c !== undefined));
}
function clearRows(el) { delete el.dataset.sig; el.replaceChildren(); }

const locale = () => (state.lang === "ko" ? "ko-KR" : undefined);
const fmtNum = (x) => (x === null || x === undefined ? "" : Number(x).toLocaleString(locale(), { maximumFractionDigits: 1 }));
const pad = (n) => String(n).padStart(2, "0");
// One date format everywhere, the CLI's (jpu.cli.rest.render.fmt_ts): "2026-12-01 09:03:10", local.
function fmtTime(s) {
  if (!s) return "";
  const d = new Date(s * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// Local wall-clock time of an epoch: "12:03:10", with the date (fmtTime) when it is not today.
function fmtClock(s) {
  const full = fmtTime(s);
  return new Date(s * 1000).toDateString() === new Date().toDateString() ? full.slice(11) : full;
}

// A duration for people: "4 s", "2 min 5 s", "1 h 3 min", "2 d 3 h" (KO: "4초", "2분 5초", …).
function fmtDur(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
  const s = Math.round(Math.max(0, seconds));
  if (seconds < 1) return t("dur.lt1");
  if (s < 60) return tf("dur.s", { s });
  if (s < 3600) { const m = Math.floor(s / 60), r = s % 60; return tf(r ? "dur.ms" : "dur.m", { m, s: r }); }
  if (s < 86400) { const hh = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60); return tf(m ? "dur.hm" : "dur.h", { h: hh, m }); }
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600);
  return tf(hh ? "dur.dh" : "dur.d", { d, h: hh });
}

// Like squeue's TIME and `jpu show` (jpu.cli.rest.render.fmt_duration): [D-]HH:MM:SS.
function fmtSlurm(seconds) {
  if (seconds === null || seconds === undefined) return "";
  let s = Math.round(seconds);
  const days = Math.floor(s / 86400); s %= 86400;
  const out = `${pad(Math.floor(s / 3600))}:${pad(Math.floor((s % 3600) / 60))}:${pad(s % 60)}`;
  return days ? `${days}-${out}` : out;
}

// sbatch --time, the rules of the CLI's parser (jpu.cli.rest.render.parse_time_limit):
// "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S" → seconds; "UNLIMITED"/"infinite" → null.
const TIME_RE = /^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$/;
function parseTimeLimit(text) {
  const s = String(text).trim();
  if (["unlimited", "infinite"].includes(s.toLowerCase())) return null;
  const m = TIME_RE.exec(s);
  if (!m) throw localError("submit.time_bad", { value: text });
  const [days, a, b, c] = m.slice(1).map((g) => (g === undefined ? null : parseInt(g, 10)));
  let seconds;
  if (days === null) {
    const parts = [a, b, c].filter((x) => x !== null);
    if (parts.length === 1) seconds = parts[0] * 60;  // minutes
    else if (parts.length === 2) seconds = parts[0] * 60 + parts[1];  // minutes:seconds
    else seconds = parts[0] * 3600 + parts[1] * 60 + parts[2];
  } else {
    seconds = days * 86400 + (a || 0) * 3600 + (b || 0) * 60 + (c || 0);
  }
  if (seconds <= 0) throw localError("submit.time_zero", { value: text });
  return seconds;
}

// A state, pending reason or end reason: English shows the code (as the CLI and Slurm do),
// Korean its translation; the tooltip says what it means (and the code, in Korean).
function codeText(kind, code) {
  if (code === null || code === undefined || code === "") return "";
  const base = String(code).split(":")[0];  // "NODE_FAIL: launch failed …" → NODE_FAIL
  if (!(`${kind}.${base}` in (STRINGS[state.lang] || {}))) return String(code);  // English: the code
  const rest = String(code).slice(base.length);
  return t(`${kind}.${base}`) + rest;
}
// D7: MinVram names the VRAM floor it waits for ("MinVram: ≥13 GB", raised by an OOM retry, X8)
const reasonCode = (j) => j.pending_reason === "MinVram" && j.min_vram_gb != null
  ? `MinVram: ≥${j.min_vram_gb} GB` : j.pending_reason;
function codeSpan(kind, code) {
  if (code === null || code === undefined || code === "") return "";
  const base = String(code).split(":")[0];
  const tip = has(`${kind}.${base}.t`) ? t(`${kind}.${base}.t`) : "";
  const title = state.lang === "en" ? tip : [base, tip].filter(Boolean).join(" — ");
  // a code breaks only after its underscores (PERSONAL_QUEUE_ / WAIT), never inside a word
  const parts = String(codeText(kind, code)).split(/(?<=_)/);
  return h("span", { class: "code", title: title || null, "data-code": base },
    parts.flatMap((p, i) => (i ? [h("wbr"), p] : [p])));
}

// --- API ---------------------------------------------------------------------------------------
function localError(key, params) {
  const e = new Error(fill(STRINGS.en[key] || key, params));
  e.i18n = { key, params };
  return e;
}

async function api(path, options = {}) {
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  if (state.token) headers.Authorization = "Bearer " + state.token;
  if (options.body) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, Object.assign({}, options, { headers }));
  } catch (e) {
    const err = new Error(String(e.message || e));
    err.network = true;
    throw err;
  }
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const e = (body && body.error) || {};
    const err = new Error(`${resp.status} ${e.code || ""}: ${e.message || resp.statusText}`);
    err.status = resp.status; err.code = e.code || ""; err.details = e.details;
    err.serverMessage = e.message || resp.statusText || "";
    throw err;
  }
  return body;
}

// The headline of an API error in the UI's language (SPEC §8 codes), and its code.
function errorHeadline(err) {
  if (err.i18n) return fill(t(err.i18n.key), err.i18n.params);
  if (err.status === 401) return t(state.token ? "token.rejected" : "token.missing");
  if (err.network) return t("err.NETWORK");
  if (err.status) return has("err." + err.code) ? t("err." + err.code) : tf("err.HTTP", { status: err.status });
  return String(err.message || err);
}

// The fix the error's details give, in the UI's language (SPEC §8 details).
function errorFix(err) {
  const d = err.details || {};
  if (err.code === "NO_FIT_PLACEMENT" && d.largest_placement && d.largest_placement.gpus) {
    const l = d.largest_placement;
    return tf("fix.no_fit", { gpus: gpusText(l.gpus), n: l.gpus, tier: l.tier, node: l.node });
  }
  if (err.code === "SERVICE_MAINTENANCE" && d.message) return tf("fix.maintenance", { message: d.message });
  if (err.code === "RATE_LIMITED" && typeof d.retry_after_s === "number") return tf("fix.rate", { s: d.retry_after_s });
  if (d.field && !String(err.serverMessage || "").includes(String(d.field))) return tf("fix.field", { field: d.field });
  return null;
}

function showError(err) { state.error = err || null; drawError(); }

function drawError() {
  const el = $("error"), err = state.error;
  if (!err) { el.hidden = true; el.replaceChildren(); return; }
  const code = err.status && !(err.status === 401 && !state.token) ? `${err.status} ${err.code || ""}`.trim() : null;
  // beneath the headline: the server's own message (it names the field, the limit, the fix)
  const server = err.status === 401 && !state.token ? null : err.network ? err.message : err.serverMessage;
  const fix = err.status ? errorFix(err) : null;
  el.replaceChildren(...[  // (replaceChildren would write a null as the text "null")
    h("div", { class: "err-head" }, errorHeadline(err), code ? [" ", h("code", { class: "err-code" }, code)] : null),
    server ? h("div", { class: "err-server" }, server) : null,
    fix ? h("div", { class: "err-fix" }, fix) : null].filter(Boolean));
  el.hidden = false;
}

function applyStrings() {
  document.documentElement.lang = state.lang;
  document.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = t(el.dataset.i18n); });
  document.querySelectorAll("[data-i18n-placeholder]").forEach((el) => { el.placeholder = t(el.dataset.i18nPlaceholder); });
  $("lang-toggle").textContent = state.lang === "ko" ? "English" : "한국어";
  drawError();
  timeHint();
}

// --- lab colours (SPEC U2): one per lab, the same in the pool grid, the tables and the chart ----
const LAB_COLORS = ["#2456c8", "#c62828", "#00838f", "#6d4c41", "#ad1457", "#3949ab", "#558b2f",
  "#ef6c00", "#37474f", "#0277bd"];

function labColor(lab) {
  let i = state.labs.indexOf(lab);
  if (i < 0) { i = 0; for (const ch of String(lab)) i = (i * 31 + ch.charCodeAt(0)) >>> 0; }
  return LAB_COLORS[i % LAB_COLORS.length];
}
const swatch = (lab) => h("span", { class: "swatch", style: { background: labColor(lab) } });

async function labNames(labsBody) {
  if (labsBody) {
    state.labs = (labsBody.labs || []).map((l) => l.lab).sort();
    state.labsAt = Date.now();
  } else if (!state.labs.length || Date.now() - state.labsAt > 60000) {
    await labNames(await api("/v1/labs"));
  }
  return state.labs;
}

// --- maintenance banner (SPEC M5): anonymous endpoint, shown in every state but NORMAL ---------
async function refreshBanner() {
  try {
    const m = await fetch("/v1/maintenance/status").then((r) => r.json());
    const banner = $("maintenance-banner");
    banner.hidden = !m.state || m.state === "NORMAL";
    banner.className = "banner " + (m.state || "");
    $("maintenance-state").textContent = m.state || "";
    $("maintenance-text").textContent = m.state && m.state !== "NORMAL"
      ? `${t("maint." + m.state)} (${t("maint.since")} ${fmtTime(m.since)})` : "";
    $("maintenance-message").textContent = m.message ? ` — ${m.message}` : "";
  } catch (_) { /* the next poll retries */ }
}

// --- views: load(arg) fetches and returns draw(); render() draws only if still current ---------
const jobLink = (id) => h("a", { href: "#/job/" + encodeURIComponent(id) }, id);

async function loadQueue() {
  const [q] = await Promise.all([api("/v1/queue"), labNames()]);
  return () => {
    const queue = q.queue || [], running = q.running || [];
    const eta = queue.some((j) => "estimated_start" in j);  // SPEC U4, once the API gives it
    $("queue-eta-head").hidden = !eta;
    setRows($("queue-rows"), JSON.stringify([eta, queue]), () => {
      const rows = queue.map((j) => h("tr", {},
        h("td", { class: "num" }, j.rank ?? "–"), h("td", {}, jobLink(j.job_id)),
        h("td", { class: "name" }, j.name), h("td", {}, swatch(j.lab), j.lab), h("td", {}, j.user), h("td", { class: "num" }, j.num_gpus),
        h("td", {}, codeSpan("state", j.state)), h("td", { class: "num" }, fmtNum(j.lab_usage)),
        h("td", { class: "num" }, fmtNum(j.lab_accrued_uncharged)),  // F4: not in the order
        eta ? h("td", { title: estimateTitle(j) }, estimateText(j)) : null,
        h("td", {}, codeSpan("reason", reasonCode(j)))));
      return rows.length ? rows : [h("tr", {}, h("td", { colspan: eta ? 11 : 10 }, t("queue.empty")))];
    });
    setRows($("running-rows"), JSON.stringify(running.map((j) => [j, Math.floor((j.elapsed_s || 0) / 60)])), () => {
      const rows = running.map((j) => h("tr", {},
        h("td", {}, jobLink(j.job_id)), h("td", { class: "name" }, j.name),
        h("td", {}, swatch(j.lab), j.lab), h("td", {}, j.user), h("td", { class: "num" }, j.num_gpus),
        h("td", {}, j.placement ? `${j.placement.node} · ${j.placement.tier} [${j.placement.gpus.join(",")}]` : ""),
        h("td", {}, codeSpan("state", j.state)), h("td", { class: "num" }, fmtSlurm(j.elapsed_s)),
        h("td", { class: "num" }, j.time_limit_s ? fmtSlurm(j.time_limit_s) : "–")));
      return rows.length ? rows : [h("tr", {}, h("td", { colspan: 9 }, t("running.empty")))];
    });
  };
}

function gpuClass(s) { return s.startsWith("job:") ? "job" : s.split(":")[0]; }

// SPEC U2 "the GPU pool by placement", with who uses what: the pool's GPUs carry job ids;
// /v1/queue (public, like squeue) says whose (user, lab) they are.
async function loadPool() {
  const [p, q] = await Promise.all([api("/v1/placements"), api("/v1/queue"), labNames()]);
  return () => {
    const who = new Map();
    for (const j of [...(q.running || []), ...(q.queue || [])]) who.set(j.job_id, j);
    const owner = (id) => who.get(id) || {};
    const holder = (kind, r) => {
      const j = owner(r.job_id);
      return h("div", { class: "holder" }, j.lab ? swatch(j.lab) : null, `${t(kind)}: `,
        j.user ? h("strong", {}, `${j.user} (${j.lab})`) : null, " ", jobLink(r.job_id),
        ` · ${t("pool.gpu")} ${r.gpus.join(",")}`);
    };
    const labs = [...new Set([...state.labs, ...[...who.values()].map((j) => j.lab)])];
    setRows($("lab-legend"), JSON.stringify(labs), () => [h("span", {}, t("gpu.labs")),
      ...labs.map((l) => h("span", { class: "lab-key", "data-lab": l }, swatch(l), l))]);
    const sig = JSON.stringify([p.placements, [...who.values()].map((j) => [j.job_id, j.user, j.lab])]);
    setRows($("pool-cards"), sig, () => (p.placements || []).map((pl) => h("div", { class: "card" },
      h("h3", {}, `${pl.node} · ${pl.tier}`),
      h("div", { class: "meta" }, `${t("pool.capacity")} ${pl.capacity} · ${t("pool.idle")} ${pl.idle}`),
      h("div", {}, (pl.gpus || []).map((g) => {
        const kind = gpuClass(g.state), ref = g.state.split(":")[1];
        const j = ref && (kind === "job" || kind === "reserved") ? owner(ref) : {};
        const style = !j.lab ? null : kind === "job" ? { background: labColor(j.lab) } : { borderColor: labColor(j.lab) };
        const label = { free: "gpu.idle", job: "gpu.running", reserved: "gpu.reserved", backfill: "gpu.backfill", down: "gpu.down" }[kind];
        const title = [`#${g.index}`, label ? t(label) : g.state, ref, j.user ? `${j.user} (${j.lab})` : null].filter(Boolean).join(" · ");
        return h("span", { class: "gpu " + kind, title, style, "data-lab": j.lab || null, "data-user": j.user || null });
      })),
      h("div", { class: "meta" },
        (pl.running || []).map((r) => holder("gpu.running", r)),
        (pl.reserved || []).map((r) => holder("gpu.reserved", r)),
        (pl.backfilled || []).map((b) => h("div", {}, `${t("gpu.backfill")}: ${t("pool.gpu")} #${b.gpu}`))))));
  };
}

// SPEC U2 "lab usage over time": the window is 1 h, 24 h (default), 7 d or 30 d; the x axis follows it: every 10 min for 1 h, every 3 h (clock times) for
// 24 h, every day for 7 d, every 5 days for 30 d (dates, MM-DD as in fmtTime), at local midnight / on the hour.
function chartTicks(x0, x1, hours) {
  const out = [];
  const d = new Date(x0 * 1000);
  if (hours <= 2) {
    d.setSeconds(0, 0);
    while (d.getMinutes() % 10) d.setMinutes(d.getMinutes() + 1);
    for (; d.getTime() / 1000 <= x1; d.setMinutes(d.getMinutes() + 10)) {
      if (d.getTime() / 1000 >= x0) out.push([d.getTime() / 1000, `${pad(d.getHours())}:${pad(d.getMinutes())}`]);
    }
  } else if (hours <= 48) {
    d.setMinutes(0, 0, 0);
    const step = hours <= 24 ? 3 : 6;
    while (d.getHours() % step) d.setHours(d.getHours() + 1);
    for (; d.getTime() / 1000 <= x1; d.setHours(d.getHours() + step)) {
      if (d.getTime() / 1000 >= x0) out.push([d.getTime() / 1000, `${pad(d.getHours())}:00`]);
    }
  } else {
    d.setHours(0, 0, 0, 0);
    const step = hours <= 24 * 8 ? 1 : 5;
    for (; d.getTime() / 1000 <= x1; d.setDate(d.getDate() + step)) {
      if (d.getTime() / 1000 >= x0) {
        out.push([d.getTime() / 1000, `${pad(d.getMonth() + 1)}-${pad(d.getDate())}`]);
      }
    }
  }
  return out;
}

function usageChart(hist, hours) {
  const NS = "http://www.w3.org/2000/svg";
  const labs = Object.keys(hist.series || {}).sort();
  const all = labs.flatMap((l) => hist.series[l]);
  if (!all.length) return h("p", {}, t("chart.empty"));
  const svg = document.createElementNS(NS, "svg");
  // drawn at the size it is shown (the box's width, the CSS height): it fills the whole width
  const box = $("usage-chart");
  const W = Math.max(480, Math.round((box && box.clientWidth) || 800)), H = 260, L = 70, B = 22, R = 14;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const x0 = hist.start, x1 = Math.max(hist.end, x0 + 1);
  Object.entries({ "data-hours": hours, "data-start": x0, "data-end": x1 }).forEach(([k, v]) => svg.setAttribute(k, v));
  const ymax = Math.max(1, ...all.map((p) => p[1]));
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => H - B - (y / ymax) * (H - B - 10);
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.append(el); return el;
  };
  for (const [x, label] of chartTicks(x0, x1, hours)) {
    add("line", { x1: sx(x), y1: 10, x2: sx(x), y2: H - B, stroke: "#eceff3" });
    add("text", { class: "tick", x: sx(x), y: H - 6, "font-size": 11, "text-anchor": "middle", fill: "#6b7280" }, label);
  }
  add("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999" });
  add("line", { x1: L, y1: 10, x2: L, y2: H - B, stroke: "#999" });
  add("text", { x: L - 6, y: 16, "font-size": 11, "text-anchor": "end" }, fmtNum(ymax));
  add("text", { x: L - 6, y: sy(ymax / 2) + 4, "font-size": 11, "text-anchor": "end" }, fmtNum(ymax / 2));
  add("text", { x: L - 6, y: H - B, "font-size": 11, "text-anchor": "end" }, "0");
  add("text", { x: L - 6, y: 30, "font-size": 10, "text-anchor": "end", fill: "#6b7280" }, "TFLOP-s");
  labs.forEach((lab, i) => {
    const color = labColor(lab);
    const pts = hist.series[lab].map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
    add("polyline", { points: pts, fill: "none", stroke: color, "stroke-width": 2, "data-lab": lab });
    add("text", { x: L + 10 + i * 90, y: 24, fill: color, "font-size": 12 }, lab);
  });
  return svg;
}

async function loadLabs() {
  const hours = state.chartHours;
  const [labs, hist] = await Promise.all([api("/v1/labs"), api(`/v1/usage/history?hours=${hours}&points=144`)]);
  await labNames(labs);
  return () => {
    document.querySelectorAll("#chart-window button").forEach((b) => {
      b.setAttribute("aria-pressed", String(Number(b.dataset.hours) === hours));
    });
    setRows($("lab-rows"), JSON.stringify(labs.labs), () => (labs.labs || []).map((l) => h("tr", {},
      h("td", {}, swatch(l.lab), l.lab), h("td", { class: "num" }, fmtNum(l.usage)),
      h("td", { class: "num" }, fmtNum(l.accrued_uncharged)),  // F4: charged when the jobs end
      h("td", { class: "num" }, fmtNum(l.raw_value)), h("td", {}, fmtTime(l.as_of)),
      h("td", { class: "num" }, l.running), h("td", { class: "num" }, l.queued))));
    // redrawn at each poll: the curves decay, and "now" moves
    $("usage-chart").replaceChildren(usageChart(hist, hours));
  };
}

// F5: a lab's charges, one by one — the answer of jpu.explain.usage, not computed here.
const RELEASE_RULE = { demoted: "R3", maintenance: "M1", capacity: "R5" };
function chargeKind(c) {
  if (c.kind === "reservation") return tf("charges.reservation", { rule: RELEASE_RULE[c.reason] || c.reason });
  if (c.kind === "run") return t(c.held.some((x) => x.what === "reservation") ? "charges.run_res" : "charges.run");
  return has("charges." + c.kind) ? t("charges." + c.kind) : c.kind;
}
function heldText(c) {
  return c.held.map((x) => `${fmtDur(x.gpu_seconds)} × ${x.tier || "?"} (${x.tflops} TFLOPS)`).join(" + ");
}

async function loadCharges(lab) {
  const me = state.me || (state.me = await api("/v1/me"));
  lab = lab || me.lab;  // a member's own lab by default
  const [x, labs] = await Promise.all([
    api(`/v1/labs/${encodeURIComponent(lab)}/usage/explain`).catch((e) => {
      throw e.status === 403 ? localError("charges.forbidden", { lab, mine: me.lab }) : e;
    }),
    me.role === "admin" ? api("/v1/labs") : null,  // admins: every lab's
  ]);
  return () => {
    $("charges-lab").textContent = lab;
    $("charges-labs").replaceChildren(...(labs ? labs.labs : []).map((l) =>
      h("a", { href: "#/charges/" + encodeURIComponent(l.lab), style: { marginRight: "1em" } }, l.lab)));
    $("charges-summary").textContent = x.charges.length
      ? tf("charges.summary", { usage: fmtNum(x.usage), hl: fmtDur(x.half_life_s) }) : t("charges.empty");
    setRows($("charge-rows"), JSON.stringify([x.at, x.charges.map((c) => c.seq)]), () => x.charges.map((c) => h("tr", {},
      h("td", {}, fmtTime(c.at)), h("td", {}, c.job_id ? jobLink(c.job_id) : ""), h("td", { class: "num" }, c.attempt ?? ""),
      h("td", {}, c.user ?? ""), h("td", {}, chargeKind(c)), h("td", {}, heldText(c)),
      h("td", { class: "num" }, fmtNum(c.amount)), h("td", { class: "num" }, c.decay.toFixed(4)),
      h("td", { class: "num" }, fmtNum(c.value_now)))));
  };
}

// Q7: an array's indices as squeue writes them, `ID_[0-3,7%2]`
function arrayLabel(id, tasks) {
  const ks = tasks.map((j) => j.array_task).sort((a, b) => a - b), parts = [];
  for (let i = 0; i < ks.length; i++) {
    let k = i;
    while (k + 1 < ks.length && ks[k + 1] === ks[k] + 1) k++;
    parts.push(k > i ? `${ks[i]}-${ks[k]}` : `${ks[i]}`);
    i = k;
  }
  const cap = tasks[0].array_throttle ? `%${tasks[0].array_throttle}` : "";
  return `${id}_[${parts.join(",")}${cap}]`;
}

// "COMPLETED:3, RUNNING:1" (in the order the API gives them, lifecycle order)
const stateCounts = (tasks) => {
  const n = {};
  tasks.forEach((j) => { n[j.state] = (n[j.state] || 0) + 1; });
  return Object.entries(n).map(([s, c]) => `${s}:${c}`).join(", ");
};

// Q8: a job ended because its dependency can never be met says so next to CANCELLED (as
// `jpu jobs`), not a bare CANCELLED
const stateCell = (j) => j.state === "CANCELLED" && j.reason === "DEPENDENCY_NEVER_SATISFIED"
  ? h("td", {}, codeSpan("state", j.state), " (", codeSpan("end", j.reason), ")")
  : h("td", {}, codeSpan("state", j.state));

const jobRow = (j, cls) => h("tr", { class: cls },
  h("td", {}, jobLink(j.id)), h("td", { class: "wrap" }, j.name), h("td", {}, j.user),
  h("td", { class: "num" }, j.num_gpus), stateCell(j),
  h("td", { class: "num" }, j.attempt));

// Q7: the tasks of one array as one row (its indices and %N, its tasks per state), expanded to
// the tasks' own rows on request; an array with one task in the page is that task's row
function jobRows(jobs, draw) {
  const tasks = new Map();
  jobs.forEach((j) => { if (j.array_id) tasks.set(j.array_id, [...(tasks.get(j.array_id) || []), j]); });
  const out = [], shown = new Set();
  for (const j of jobs) {
    const members = j.array_id ? tasks.get(j.array_id) : null;
    if (!members || members.length < 2) { out.push(jobRow(j)); continue; }
    if (shown.has(j.array_id)) continue;
    shown.add(j.array_id);
    const open = state.openArrays.has(j.array_id);
    const toggle = h("button", { class: "expand", type: "button", "aria-expanded": String(open),
      title: t(open ? "jobs.collapse" : "jobs.expand"), "data-array": j.array_id }, open ? "▾" : "▸");
    toggle.addEventListener("click", () => {
      if (open) state.openArrays.delete(j.array_id); else state.openArrays.add(j.array_id);
      draw();
    });
    out.push(h("tr", { class: "array-row", "data-array": j.array_id },
      h("td", {}, toggle, " ", h("a", { href: "#/job/" + encodeURIComponent(j.array_id) }, arrayLabel(j.array_id, members))),
      h("td", { class: "wrap" }, j.name), h("td", {}, j.user), h("td", { class: "num" }, j.num_gpus),
      h("td", {}, stateCounts(members)), h("td", { class: "num" }, "–")));
    if (open) [...members].sort((a, b) => a.array_task - b.array_task).forEach((m) => out.push(jobRow(m, "task-row")));
  }
  return out;
}

async function loadJobs() {
  const r = await api("/v1/jobs?limit=100");
  const draw = () => setRows($("job-rows"), JSON.stringify([r.jobs, [...state.openArrays]]), () => {
    const rows = jobRows(r.jobs || [], draw);
    return rows.length ? rows : [h("tr", {}, h("td", { colspan: 6 }, t("jobs.empty")))];
  });
  return draw;
}

// SPEC X4a: the user's default workspace (PUT /v1/me/workspace; null clears it), then the view again
async function setDefaultWorkspace(name) {
  try {
    await api("/v1/me/workspace", { method: "PUT", body: JSON.stringify({ workspace: name }) });
    showError(null); render();
  } catch (e) { showError(e); }
}

// The row a default name means: the user's own workspace of that name, else the lab's (X4a)
const isDefault = (w, all, name) => w.name === name
  && (w.scope === "user" || !all.some((o) => o.scope === "user" && o.name === name));

// SPEC X4a: workspaces (own and the lab's) with their state, and the user's default (set from a
// row, cleared above the list); `#/workspaces/<scope>:<name>` shows that one's build log below
async function loadWorkspaces(arg) {
  const [r, mine] = await Promise.all([api("/v1/workspaces"), api("/v1/me/workspace")]);
  const all = r.workspaces || [], current = mine.workspace;
  const [scope, name] = arg ? arg.split(/:(.*)/s) : [];
  let log = null;
  if (name) {  // text/plain, not JSON: read as text (its errors are the §8 envelope)
    const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
    const resp = await fetch(`/v1/workspaces/${encodeURIComponent(name)}/log?scope=${scope}`, { headers });
    log = resp.ok ? await resp.text() : `(${resp.status} ${(await resp.json().catch(() => ({}))).error?.message || ""})`;
  }
  const mark = (w) => {
    if (isDefault(w, all, current)) return h("strong", { class: "ws-is-default" }, t("ws.is_default"));
    if (!isDefault(w, all, w.name)) return "";  // a lab's workspace behind an own one of its name
    const b = h("button", { type: "button", class: "ws-make-default" }, t("ws.make_default"));
    b.onclick = () => setDefaultWorkspace(w.name);
    return b;
  };
  return () => {
    $("ws-default").textContent = current || t("ws.default_none");
    $("ws-default-clear").hidden = !current;
    $("ws-default-clear").onclick = () => setDefaultWorkspace(null);
    setRows($("ws-rows"), JSON.stringify([all, current]), () => {
      const rows = all.map((w) => h("tr", {},
        h("td", {}, h("a", { href: `#/workspaces/${w.scope}:${encodeURIComponent(w.name)}` }, w.name)),
        h("td", {}, w.scope), h("td", {}, w.scope === "lab" ? w.lab : w.user),
        h("td", {}, w.state), h("td", { class: "wrap" }, w.reason || ""),
        h("td", { class: "num" }, w.size ? `${Math.round(w.size / 1048576)} MiB` : "–"),
        h("td", {}, w.created_at ? fmtTime(w.created_at) : "–"), h("td", {}, mark(w))));
      return rows.length ? rows : [h("tr", {}, h("td", { colspan: 8 }, t("ws.empty")))];
    });
    $("ws-log-title").textContent = name ? tf("ws.log", { name }) : "";
    $("ws-log").textContent = name ? (typeof log === "string" && log ? log : t("ws.nolog")) : "";
    $("ws-log").hidden = !name;
  };
}

// SPEC U4: an estimate, with its basis and when it was computed; with no start, "unknown" and
// why (the API's estimate_reason), never the basis "unknown" a second time
const estimateText = (j) => j.estimated_start ? fmtTime(j.estimated_start)
  : j.estimate_basis ? t("est.unknown") : "–";
const estimateTitle = (j) => {
  if (!j.estimate_basis && !j.estimate_reason) return null;
  const what = j.estimated_start ? t("est." + j.estimate_basis) : j.estimate_reason || t("est.unknown");
  return `${what}${j.estimated_at ? ` · ${t("est.at")} ${fmtTime(j.estimated_at)}` : ""}`;
};

function describe(key, v, job) {
  if (key === "estimated_start" && (job.estimate_basis || job.estimate_reason)) {
    return job.estimated_start ? `${estimateText(job)} (${estimateTitle(job)})`
      : `${t("est.unknown")}: ${estimateTitle(job)}`;
  }
  if (v === null || v === undefined || v === "") return null;
  if (key === "state") return codeSpan("state", v);
  if (key === "pending_reason") return codeSpan("reason", reasonCode(job));
  if (key === "reason") return codeSpan("end", v);
  if (key === "placement") return `${v.node} · ${v.tier} [${(v.gpus || []).join(",")}]`;
  if (key === "reservation") return `${v.node} · ${v.tier} [${(v.gpus || []).join(",")}] ${t("maint.since")} ${fmtTime(v.since)}`;
  if (key === "time_limit_s") return fmtSlurm(v);
  if (key === "elapsed_s") return fmtSlurm(v);
  if (key.endsWith("_at")) return fmtTime(v);
  if (key === "usage_charged") return fmtNum(v) + " TFLOP-s";
  if (key === "states") return Object.entries(v).map(([st, n]) => `${st}:${n}`).join(", ");
  if (key === "tasks") return h("span", {}, v.flatMap((id, i) => [i ? ", " : "", jobLink(id)]));
  if (key === "array_id") return jobLink(v);
  if (key === "held") return v ? t("f.held") : null;
  if (Array.isArray(v)) return v.join(", ");
  return String(v);
}

const JOB_FIELDS = ["state", "states", "tasks", "array_id", "held", "attempt", "user", "lab", "num_gpus", "tiers", "min_vram_gb", "rank",
  "pending_reason", "estimated_start", "placement", "reservation", "time_limit_s", "elapsed_s",
  "usage_charged", "backend_job_id", "isolation", "exit_code", "reason", "submitted_at",
  "queue_entered_at", "ended_at", "workdir", "account"];

// --- the event timeline (SPEC U2): each event a sentence, its local time, how long since what it
// follows; the raw event behind a <details> toggle
const gpusText = (n) => tf(n === 1 ? "ev.gpus" : "ev.gpus_n", { n });

function timeline(events) {
  let submitted = null, queued = null, reserved = null, dispatched = null, started = null;
  return events.map((e) => {
    const { type, ts } = e;
    let text, dur = null;
    const since = (from, key) => { if (from !== null) dur = tf(key, { d: fmtDur(ts - from) }); };
    const n = (e.gpus || []).length;
    switch (type) {
      case "JobSubmitted":
        submitted = ts; queued = ts;
        text = tf("ev.JobSubmitted", { user: e.user, lab: e.lab, name: e.name, gpus: gpusText(e.num_gpus),
          tiers: e.tiers && e.tiers.length ? tf("ev.tiers", { tiers: e.tiers.join(", ") }) : "",
          limit: e.time_limit_s ? tf("ev.limit", { limit: fmtSlurm(e.time_limit_s) }) : "" });
        break;
      case "JobPromoted":
        text = t("ev.JobPromoted"); since(submitted, "ev.JobPromoted.d");
        queued = e.queue_entered_at ?? ts;
        break;
      case "ReservationStarted":
        reserved = ts;
        text = tf("ev.ReservationStarted", { gpus: gpusText(n), node: e.node, tier: e.tier });
        since(queued, "ev.ReservationStarted.d");
        break;
      case "ReservationGrown":
        text = tf("ev.ReservationGrown", { gpus: gpusText(n), node: e.node, tier: e.tier });
        since(reserved, "ev.ReservationGrown.d");
        break;
      case "ReservationShrunk":
        text = tf("ev.ReservationShrunk", { gpus: gpusText(n), node: e.node, tier: e.tier, removed: (e.removed || []).join(",") });
        break;
      case "ReservationReleased":
        text = tf("ev.ReservationReleased", { gpus: gpusText(n), node: e.node, tier: e.tier,
          why: has("rel." + e.reason) ? t("rel." + e.reason) : e.reason });
        since(reserved, "ev.ReservationReleased.d");
        reserved = null;
        break;
      case "JobDispatched":
        dispatched = ts; started = null;
        text = tf("ev.JobDispatched", { attempt: e.attempt, node: e.node, tier: e.tier, list: (e.gpus || []).join(",") });
        since(queued, "ev.JobDispatched.d");
        break;
      case "JobStarted":
        started = ts;
        text = tf("ev.JobStarted", { attempt: e.attempt, backend: e.backend_job_id, isolation: e.isolation });
        since(dispatched, "ev.JobStarted.d");
        break;
      case "JobEnded":
        text = tf("ev.JobEnded", { attempt: e.attempt, state: codeText("state", e.state),
          exit: e.exit_code !== null && e.exit_code !== undefined ? tf("ev.exit", { code: e.exit_code }) : "",
          reason: e.reason ? tf("ev.reason", { reason: codeText("end", e.reason) }) : "",
          usage: e.usage ? tf("ev.usage", { usage: fmtNum(e.usage) }) : "" });
        if (started !== null) since(started, "ev.JobEnded.d"); else since(dispatched, "ev.JobEnded.held");
        break;
      case "JobRetryScheduled":
        queued = ts;  // back in the global queue, keeping its place (X8)
        // X8: the event opens attempt n+1; the one that ran out of memory is n
        text = tf("ev.JobRetryScheduled", { attempt: e.attempt - 1, next: e.attempt, vram: e.min_vram_gb });
        break;
      case "JobRetryDeclined":
        text = tf("ev.JobRetryDeclined", { attempt: e.attempt,
          why: has("ev.JobRetryDeclined." + e.reason) ? tf("ev.JobRetryDeclined." + e.reason, { vram: e.needed_vram_gb }) : e.reason });
        break;
      case "JobCancelRequested":
        text = tf("ev.JobCancelRequested", { by: e.by });
        break;
      default:
        text = tf("ev.other", { type });
    }
    return h("li", { "data-type": type, "data-seq": e.seq },
      h("span", { class: "sentence" }, text),
      h("span", { class: "sep" }, " · "), h("time", { class: "t", datetime: new Date(ts * 1000).toISOString(), title: fmtTime(ts) }, fmtClock(ts)),
      dur ? [h("span", { class: "sep" }, " · "), h("span", { class: "dur" }, dur)] : null,
      // the event as recorded, for whoever needs it (an admin, a bug report)
      h("details", { class: "raw" }, h("summary", {}, t("ev.raw")), h("pre", {}, JSON.stringify(e, null, 2))));
  });
}

// --- the log pane (SPEC U5): GET /v1/jobs/{id}/logs of the selected attempt and stream -----------
// The first read is the last LOG_TAIL bytes (offset < 0); then only what was appended since
// (offset = Jpu-Log-End), every 2 s while the attempt runs, until Jpu-Log-Ended says it is final.
const LOG_TAIL = 64 * 1024, LOG_KEEP = 256 * 1024;

function resetLog(jobId) {
  state.log = { job: jobId, pinned: false, attempt: null, stream: "stdout", key: null, text: "",
    next: null, ended: false, missing: false, truncated: false, error: null, busy: false,
    latest: null, decoder: null };
  $("job-log").textContent = "";
  $("job-log-status").textContent = "";
  $("job-log-attempt").replaceChildren();
  document.querySelectorAll("input[name=job-log-stream]").forEach((r) => { r.checked = r.value === "stdout"; });
}

function drawLog() {
  const L = state.log, pre = $("job-log");
  if (!L || !L.latest) return;
  const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
  if (pre.textContent !== L.text) pre.textContent = L.text;
  if (atBottom) pre.scrollTop = pre.scrollHeight;  // keep following the end unless scrolled up
  const err = L.error ? `${errorHeadline(L.error)} (${L.error.status || ""} ${L.error.code || ""}) ${L.error.serverMessage || ""}` : "";
  const parts = [err || (L.missing ? t("log.none") : L.ended ? t("log.ended") : t("log.running"))];
  if (L.truncated && !L.missing) parts.push(t("log.truncated"));
  $("job-log-status").textContent = parts.join(" ");
}

async function refreshLog(job) {
  if (job) {
    if (!state.log || state.log.job !== job.id) resetLog(job.id);
    state.log.latest = job;
  }
  const L = state.log;
  if (!L || !L.latest) return;
  const latest = L.latest, attempt = L.pinned ? L.attempt : latest.attempt;
  const key = `${latest.id}/${attempt}/${L.stream}`;
  if (key !== L.key) {
    Object.assign(L, { key, attempt, text: "", next: null, ended: false, missing: false,
      truncated: false, error: null, decoder: new TextDecoder("utf-8") });
  }
  const select = $("job-log-attempt");
  if (select.options.length !== latest.attempt) {
    select.replaceChildren(...Array.from({ length: latest.attempt }, (_, i) =>
      h("option", { value: String(i + 1) }, String(i + 1))));
  }
  select.value = String(attempt);
  if (L.ended || L.busy) { drawLog(); return; }
  L.busy = true;
  try {
    const offset = L.next === null ? -LOG_TAIL : L.next;
    const q = `attempt=${attempt}&stream=${L.stream}&offset=${offset}`;
    const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
    const resp = await fetch(`/v1/jobs/${encodeURIComponent(latest.id)}/logs?${q}`, { headers });
    if (key !== L.key || L !== state.log) return;  // another attempt, stream or job meanwhile
    if (resp.ok) {
      const bytes = new Uint8Array(await resp.arrayBuffer());
      if (key !== L.key || L !== state.log) return;
      if (L.next === null && Number(resp.headers.get("Jpu-Log-Start")) > 0) L.truncated = true;
      L.text += L.decoder.decode(bytes, { stream: true });
      if (L.text.length > LOG_KEEP) { L.text = L.text.slice(-LOG_KEEP); L.truncated = true; }
      L.next = Number(resp.headers.get("Jpu-Log-End"));
      L.ended = resp.headers.get("Jpu-Log-Ended") === "true";
      L.missing = false; L.error = null;
    } else if (resp.status === 404) {
      L.missing = true;  // not started yet; an attempt that is over will never have any
      L.ended = latest.terminal || attempt < latest.attempt;
    } else {
      const e = ((await resp.json().catch(() => ({}))).error) || {};
      L.error = { status: resp.status, code: e.code || "", serverMessage: e.message || resp.statusText };
    }
  } catch (e) {
    L.error = { network: true, message: String(e.message || e), serverMessage: String(e.message || e) };
  } finally {
    L.busy = false;
  }
  if (L === state.log) drawLog();
}

function clearJob(id) {
  $("job-body").hidden = true;
  $("job-title").textContent = "";
  clearRows($("job-fields"));
  clearRows($("job-events"));
  $("job-cancel").onclick = null;
  resetLog(id);
  state.files = null;  // the files pane (files.js) starts again
  clearRows($("job-files-rows"));
}

// Q8: the parents a job's `dependency` names (Slurm syntax; `singleton` names none)
const parentsOf = (dep) => (dep || "").split(",").flatMap((part) => {
  const [kind, ...ids] = part.split(":");
  return ids.filter(Boolean).map((id) => ({ kind, id }));
});

// Q8: the dependency chain up from a job: each parent (a job, a task or a whole array) with its
// state, then its own parents, a few levels up (one GET each, at most DEP_MAX)
const DEP_DEPTH = 4, DEP_MAX = 20;
async function dependencyChain(dep, seen = new Set(), depth = 0) {
  const parents = parentsOf(dep).filter((p) => !seen.has(p.id) && seen.size < DEP_MAX);
  parents.forEach((p) => seen.add(p.id));
  return Promise.all(parents.map(async (p) => {
    const job = await api("/v1/jobs/" + encodeURIComponent(p.id)).catch(() => null);
    const up = job && job.dependency && depth + 1 < DEP_DEPTH
      ? await dependencyChain(job.dependency, seen, depth + 1) : [];
    return { ...p, job, up };
  }));
}

function chainNodes(chain) {
  if (!chain.length) return null;
  return h("ul", { class: "dep-chain" }, chain.map((p) => h("li", { "data-parent": p.id },
    `${p.kind} → `, jobLink(p.id), p.job ? ` ${p.job.name} ` : ` (${t("dep.unknown")})`,
    p.job ? (p.job.states ? `(${describe("states", p.job.states)})` : codeSpan("state", p.job.state)) : null,
    chainNodes(p.up))));
}

async function loadJob(id) {
  const [job, ev] = await Promise.all([
    api("/v1/jobs/" + encodeURIComponent(id)),
    api("/v1/jobs/" + encodeURIComponent(id) + "/events").catch((e) => e)]);
  const array = Array.isArray(job.tasks);  // Q7: an array's page: its fields and tasks
  if (ev instanceof Error) throw ev;
  const deps = job.dependency ? await dependencyChain(job.dependency, new Set([job.id])) : [];
  const chain = deps.length ? h("span", {}, job.dependency, chainNodes(deps)) : null;
  return () => {
    $("job-body").hidden = false;
    $("job-title").textContent = job.id;
    setRows($("job-fields"), JSON.stringify([job, deps]), () => {
      const items = JOB_FIELDS.flatMap((k) => {
        // Q7: an array's own page is not a task of itself
        if (k === "array_id" && job[k] === job.id) return [];
        let v = describe(k, job[k], job);
        // X8 raises min_vram_gb after an OOM: never show it as if the user had set it
        if (k === "min_vram_gb" && v !== null && "min_vram_gb_requested" in job
            && job.min_vram_gb_requested !== job.min_vram_gb) v += ` (${t("f.raised_by_oom")})`;
        return v === null ? [] : [h("dt", {}, t("f." + k)), h("dd", { "data-field": k }, v)];
      });
      (job.oom_explanation || []).forEach((s) => items.push(h("dt", {}, t("f.oom_retry")), h("dd", {}, s)));
      // SPEC U6: the sbatch options accepted with a warning at submit, kept on the job
      (job.sbatch_warnings || []).forEach((s) => items.push(h("dt", {}, t("f.sbatch_warning")), h("dd", { "data-field": "sbatch_warning" }, s)));
      if (job.command) items.push(h("dt", {}, t("f.command")), h("dd", {}, h("pre", {}, job.command)));
      if (chain) items.push(h("dt", {}, t("f.dependency")), h("dd", { "data-field": "dependency" }, chain));
      return items;
    });
    $("job-cancel").hidden = Boolean(job.terminal) || ["COMPLETED", "FAILED", "CANCELLED"].includes(job.state);
    $("job-cancel").onclick = async () => {
      try {
        await api(`/v1/jobs/${encodeURIComponent(id)}/cancel`, { method: "POST" }); showError(null);
        alert(t("job.cancel_sent")); render({ poll: true });
      } catch (e) { showError(e); }
    };
    $("job-run-panes").hidden = array;
    if (array) return;  // each task has its own output, files, events and wait
    const events = ev.events || [];
    setRows($("job-events"), events.map((e) => e.seq).join(","), () => timeline(events));
    drawWhy(job.id);  // why.js (U4)
    refreshLog(job);
    refreshFiles(job);  // files.js (SPEC §8 files)
  };
}

// --- the submit form (SPEC U2; the time limit as SPEC U1's `jpu submit --time`) ---------------
function timeHint() {
  const input = document.querySelector("#submit-form input[name=time_limit]"), hint = $("time-hint");
  if (!input || !hint) return;
  const v = input.value.trim();
  if (!v) { hint.textContent = ""; input.removeAttribute("aria-invalid"); return; }
  try {
    const s = parseTimeLimit(v);
    hint.textContent = s === null ? `= ${t("submit.time_none")}` : `= ${fmtDur(s)} (${fmtSlurm(s)})`;
    input.removeAttribute("aria-invalid");
  } catch (e) {
    hint.textContent = errorHeadline(e);
    input.setAttribute("aria-invalid", "true");
  }
}

async function submitJob(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const body = { name: f.get("name"), command: f.get("command"), num_gpus: Number(f.get("num_gpus")) };
  const tiers = String(f.get("tiers") || "").split(",").map((s) => s.trim()).filter(Boolean);
  if (tiers.length) body.tiers = tiers;
  const chdir = String(f.get("chdir") || "").trim();  // U5: as `jpu submit -D`; the API checks it
  if (chdir) body.chdir = chdir;
  const out = $("submit-result");
  const refuse = (err) => { out.textContent = ""; showError(err); };
  const limit = String(f.get("time_limit") || "").trim();
  if (limit) {
    try {
      const s = parseTimeLimit(limit);
      if (s !== null) body.time_limit_s = s;
    } catch (e) { refuse(e); return; }
  }
  // KEY=VALUE per line; a line without "=" is the user's mistake to see, never dropped silently
  const env = {};
  const lines = String(f.get("env") || "").split("\n");
  for (let n = 0; n < lines.length; n++) {
    const l = lines[n].trim();
    if (!l) continue;
    const i = l.indexOf("=");
    if (i <= 0) { refuse(localError("submit.env_bad", { n: n + 1, line: l })); return; }
    env[l.slice(0, i)] = l.slice(i + 1);
  }
  if (Object.keys(env).length) body.env = env;
  try {
    const job = await api("/v1/jobs", { method: "POST", body: JSON.stringify(body),
      headers: { "Idempotency-Key": crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) } });
    out.replaceChildren(`${t("submit.ok")} `, jobLink(job.id), " (", codeSpan("state", job.state), ")",
      ...(job.warnings || []).map((w) => h("p", { class: "warning" }, w.message)));  // U5: e.g. a read-only chdir
    showError(null);
  } catch (e) { refuse(e); }
}

// --- routing, with a request token: only the latest render may draw ----------------------------
const VIEWS = { queue: loadQueue, pool: loadPool, labs: loadLabs, jobs: loadJobs, job: loadJob, charges: loadCharges, workspaces: loadWorkspaces, submit: null };
const CLEAR = {
  queue: () => { clearRows($("queue-rows")); clearRows($("running-rows")); },
  pool: () => { clearRows($("pool-cards")); },
  labs: () => { clearRows($("lab-rows")); $("usage-chart").replaceChildren(); },
  jobs: () => { clearRows($("job-rows")); },
  workspaces: () => { clearRows($("ws-rows")); $("ws-log").textContent = ""; $("ws-default").textContent = ""; },
  job: (id) => clearJob(id),
  charges: () => { clearRows($("charge-rows")); $("charges-summary").textContent = ""; $("charges-lab").textContent = ""; },
};

function route() {
  const [, name = "queue", arg] = (location.hash || "#/queue").split("/");
  const view = name in VIEWS ? name : "queue";
  return { view, arg: arg ? decodeURIComponent(arg) : undefined };
}

async function render(opts = {}) {
  const { view, arg } = route();
  const key = `${view}/${arg ?? ""}`;
  if (opts.poll && (state.busy || key !== state.viewKey)) return;  // a navigation is under way
  const tok = ++state.nav;
  if (key !== state.viewKey) {  // a navigation: nothing of the previous view stays on screen
    state.viewKey = key;
    if (CLEAR[view]) CLEAR[view](arg);
    showError(null);
  }
  document.querySelectorAll(".view").forEach((s) => { s.hidden = s.id !== "view-" + view; });
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.hash === "#/" + view));
  refreshBanner();
  if (!VIEWS[view]) return;
  state.busy = tok;
  try {
    const draw = await VIEWS[view](arg);
    if (tok !== state.nav) return;  // the answer of an older navigation or poll: dropped
    draw();
    showError(null);
  } catch (e) {
    if (tok !== state.nav) return;
    if (view === "job") clearJob(arg);  // a 403/404 alone, never above another job
    showError(e);
  } finally {
    if (state.busy === tok) state.busy = 0;
  }
}

async function whoami() {
  if (!state.token) { $("whoami").textContent = ""; return; }
  try {
    const me = state.me = await api("/v1/me"); $("whoami").textContent = `${me.user} (${me.lab}, ${me.role})`;
    $("charges-link").href = "#/charges/" + encodeURIComponent(me.lab);  // F5: their own lab's
  } catch (_) { $("whoami").textContent = ""; state.me = null; }
}

// Live updates (SPEC U2): the current view's endpoints every POLL_MS (the log pane every LOG_POLL_MS)
// while the page is visible; nothing while it is hidden; at once when it shows again.
function startPolling() {
  if (state.timers) return;
  state.timers = [
    setInterval(() => { if (!location.hash.startsWith("#/submit")) render({ poll: true }); }, POLL_MS),
    setInterval(() => {
      if (location.hash.startsWith("#/job/") && state.log && !state.log.ended) refreshLog();
    }, LOG_POLL_MS),
  ];
}
function stopPolling() {
  (state.timers || []).forEach(clearInterval);
  state.timers = null;
}

function start() {
  applyStrings();
  $("token-input").value = state.token;
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("token-input").value.trim();
    localStorage.setItem("jpu.token", state.token);
    state.labs = []; state.me = null;
    state.viewKey = null;  // everything again, as the new user sees it
    whoami(); render();
  });
  $("lang-toggle").addEventListener("click", () => {
    state.lang = state.lang === "ko" ? "en" : "ko";
    localStorage.setItem("jpu.lang", state.lang);
    applyStrings(); render();
  });
  $("job-open").addEventListener("submit", (ev) => {
    ev.preventDefault(); location.hash = "#/job/" + encodeURIComponent($("job-id-input").value.trim());
  });
  $("submit-form").addEventListener("submit", submitJob);
  document.querySelector("#submit-form input[name=time_limit]").addEventListener("input", timeHint);
  document.querySelectorAll("#chart-window button").forEach((b) => b.addEventListener("click", () => {
    const hours = Number(b.dataset.hours);
    if (!CHART_WINDOWS.includes(hours) || hours === state.chartHours) return;
    state.chartHours = hours;
    state.viewKey = null;  // a new window: drop what an older request would draw
    render();
  }));
  $("job-log-attempt").addEventListener("change", (ev) => {
    if (!state.log) return;
    state.log.pinned = true; state.log.attempt = Number(ev.target.value); refreshLog();
  });
  document.querySelectorAll("input[name=job-log-stream]").forEach((r) => r.addEventListener("change", () => {
    if (state.log && r.checked) { state.log.stream = r.value; refreshLog(); }
  }));
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) { stopPolling(); return; }
    startPolling(); render({ poll: true });
  });
  window.addEventListener("hashchange", () => render());
  whoami(); render();
  if (!document.hidden) startPolling();
}

start();

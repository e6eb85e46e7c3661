// "Why it waited" on the job page (SPEC U4): GET /v1/jobs/{id}/wait in sentences, in
// the console's language. Loaded on request (a replay of the log, not for every poll) and kept for
// the job shown, so a poll or the language toggle redraws it without asking again.
// Uses console.js's helpers (t, tf, h, api, fmtTime, fmtDur, fmtNum, STRINGS, $).
"use strict";

Object.assign(STRINGS.en, {
  "why.title": "Why it waited", "why.load": "Explain the wait",
  "why.phases": "Time in each phase: {phases}",
  "why.rank": "rank {rank} of {n}", "why.dispatching": "GPUs free: dispatched in this cycle",
  "why.because": "because {cause}", "why.ahead": "ahead of it: {labs}",
  "why.sampled": "(sampled far back in the queue: several events since the line before)",
  "why.ahead_lab": "{lab} {usage} TFLOP-s ({jobs})",
  "why.no_res": "It never held a reservation.",
  "why.res": "Reserved {gpus} on {node} ({tier}) from {start} for {dur}: {end}",
  "why.res_held": "Reserving {gpus} on {node} ({tier}) since {start}",
  "why.res_now": "{cost} TFLOP-s charged to {lab} at once (R3)",
  "why.res_later": "{cost} TFLOP-s charged with the run (R4)",
  "why.demoted": "Why it lost the reservation: {cause}; then {first_lab}'s job {first} ({usage} TFLOP-s) ranked first, and only the rank-1 job keeps a reservation (R3).",
  "why.release.demoted": "released, no longer rank 1", "why.release.swap": "it ran elsewhere",
  "why.release.dispatched": "it ran on them", "why.release.cancelled": "the job was cancelled",
  "why.release.maintenance": "maintenance", "why.release.capacity": "the placement lost GPUs",
  "why.phase.personal_queue": "personal queue", "why.phase.global_queue": "global queue",
  "why.phase.reserving": "reserving", "why.phase.starting": "dispatched → started",
  "why.phase.running": "running", "why.phase.cancelling": "cancelling",
  "why.phase.retry_decision": "OOM retry decision",
  "why.reason.ConcurrencyLimit": "waiting for a slot: all of {user}'s slots are held, by {jobs} (S1)",
  "why.reason.ConcurrencyLimit.none": "waiting for a slot: no job of {user} holds one, yet their limit (max_active_jobs) admits no more now (S1)",
  "why.reason.MinVram": "waits for a GPU with at least {min_vram} GB; only smaller GPUs are idle (D7)",
  "why.reason.Dependency": "it waits for the jobs it depends on, holding no slot (Q8)",
  "why.reason.Held": "it is held: `jpu release ID` lets it run (Q9)",
  "why.reason.ArrayThrottle": "waiting for its array's %N: the tasks {jobs} hold every slot the array may use at once; the next of them to end lets it run (Q7)",
  "why.cause.submitted": "it was submitted; every job enters its user's personal queue first (Q4)",
  "why.cause.promoted_free_slot": "{user} had a free slot ({count} of their other jobs held slots): promoted {after}",
  "why.cause.promoted_slot_freed": "job {jobs} ended and freed one of {user}'s slots: promoted after {waited} (Q5)",
  "why.cause.retried": "it ran out of GPU memory on {tier} ({vram} GB): retried on a GPU with at least {min_vram} GB (X8)",
  "why.cause.retry_declined.max_attempts": "no retry: it ran out of GPU memory on its last allowed attempt (X8)",
  "why.cause.retry_declined.no_fit": "no retry: no GPU has the {min_vram} GB it would need (X8)",
  "why.cause.reserved": "it is rank 1 and needs {needed} GPUs, but {node} ({tier}) had only {count} idle: it holds those while the rest free up (R1)",
  "why.cause.reservation_grown": "GPU {gpus} on {node} freed{freed}: it now holds {count} of {needed} (R2)",
  "why.cause.reservation_shrunk.lost": "GPU {gpus} on {node} went down or was taken: it still holds {count} of {needed} (R5)",
  "why.cause.reservation_shrunk.yielded": "it gave GPU {gpus} on {node} to a higher-ranked job that could start only there; it holds {count} of {needed} (R6)",
  "why.cause.reservation_shrunk.lent": "it lent GPU {gpus} on {node} to {jobs}, whose time limit ends before it could start anyway; they come back to it; it holds {count} of {needed} (R7)",
  "why.cause.released_demoted": "it was no longer rank 1: {other_lab}'s job {jobs} ranked first, and only the rank-1 job keeps a reservation (R3)",
  "why.cause.released_maintenance": "maintenance began: every reservation is released (M1)",
  "why.cause.released_capacity": "its placement on {node} lost GPUs or its tier was turned off: the reservation was released (R5)",
  "why.cause.released_cancelled": "it was cancelled: its reservation was released",
  "why.cause.released_to_run": "all {needed} GPUs it needs are free on {node}: it starts on its reservation",
  "why.cause.released_swap": "enough GPUs freed elsewhere first: it starts there and lets its reservation on {node} go (R4)",
  "why.cause.dispatched": "{node} ({tier}) had GPU {gpus} free for it{freed}",
  "why.cause.dispatched_reserved": "the last of the GPUs it reserved on {node} freed{freed}: all {needed} are its (R2)",
  "why.cause.dispatched_lent": "its time limit ends before {jobs} can start: it started on GPU {gpus} on {node} that {jobs}'s reservation held, lent until then (R7)",
  "why.cause.started": "{node} started it",
  "why.cause.completed": "its command exited with code 0",
  "why.cause.exited": "its command exited with code {code}",
  "why.cause.out_of_memory": "it ran out of GPU memory on {tier} ({vram} GB) (X7)",
  "why.cause.timed_out": "it ran past its time limit",
  "why.cause.failed": "it failed: {reason}",
  "why.cause.cancelled": "it was cancelled",
  "why.cause.cancel_requested": "{by} cancelled it",
  "why.cause.held": "{by} held it: it is not promoted until released (Q9)",
  "why.cause.released": "{by} released it: it may be promoted again (Q9)",
  "why.cause.dependency_never_satisfied": "a job it depends on ended so that its dependency can never be met (Q8)",
  "why.cause.dependency_never_satisfied.parent": "job {jobs} it depends on ended {state}, so its dependency can never be met (Q8)",
  "why.cause.dependency_never_satisfied.unknown": "job {jobs} it depends on is not known here, so its dependency can never be met (Q8)",
  "why.cause.other_entered": "job {job} ({lab}) entered the global queue",
  "why.cause.other_entered_ahead": "job {job} ({lab}) entered the global queue ahead of it: the lab with lower usage ranks first (D1)",
  "why.cause.other_retried": "job {job} ({lab}) came back to retry on a GPU with at least {min_vram} GB (X8)",
  "why.cause.other_ended": "job {job} ({lab}) ended, freeing GPU {gpus} on {node}",
  "why.cause.other_left": "job {job} ({lab}) left the queue before it ran",
  "why.cause.other_dispatched": "job {job} ({lab}) took GPU {gpus} on {node}",
  "why.cause.other_reserved": "job {job} ({lab}) reserved GPU {gpus} on {node} (R1)",
  "why.cause.other_reservation_changed": "job {job} ({lab}) now reserves GPU {gpus} on {node}",
  "why.cause.other_released": "job {job} ({lab}) let its reservation on {node} go: {why}",
  "why.cause.other_cancelled": "{by} cancelled job {job} ({lab})",
  "why.cause.charged": "{lab} was charged for job {job}",
  "why.cause.initial_usage": "{lab}'s starting usage was recorded",
  "why.cause.maintenance_draining": "the admin {by} started maintenance{message}: nothing new is dispatched (M1)",
  "why.cause.maintenance_recovery": "maintenance: the user jobs are done and LLM backfill is being reclaimed (M2)",
  "why.cause.maintenance_active": "maintenance is under way (M3)",
  "why.cause.maintenance_ended": "the admin {by} ended maintenance{message}: dispatching resumes",
  "why.cause.node_changed": "node {node} reported its GPUs ({state}, {count} down)",
  "why.cause.backfill_ended": "LLM backfill on GPU {gpus} of {node} stopped ({reason})",
  "why.at_once": "at once",
  "why.after": "after {waited}",
  "why.freed_by": ", freed by job {jobs}",
  "why.message": ": “{message}”",
  "why.usage": " ({lab}'s usage: {usage} TFLOP-s)",
  "why.charged": ", charging {lab} {charge} TFLOP-s (now {usage})",
});
Object.assign(STRINGS.ko, {
  "why.title": "대기 이유", "why.load": "대기 이유 보기",
  "why.phases": "단계별 시간: {phases}",
  "why.rank": "{n}개 중 {rank}위", "why.dispatching": "GPU가 비어 이번 주기에 배정됩니다",
  "why.because": "원인: {cause}", "why.ahead": "앞선 연구실: {labs}",
  "why.sampled": "(대기열 뒤쪽이라 표본으로 봄: 이전 줄 이후 여러 이벤트)",
  "why.ahead_lab": "{lab} {usage} TFLOP-s ({jobs})",
  "why.no_res": "예약을 잡은 적이 없습니다.",
  "why.res": "{node} ({tier})의 {gpus}를 {start}부터 {dur} 동안 예약: {end}",
  "why.res_held": "{node} ({tier})의 {gpus}를 {start}부터 예약 중",
  "why.res_now": "{cost} TFLOP-s를 즉시 {lab}에 부과 (R3)",
  "why.res_later": "{cost} TFLOP-s는 실행과 함께 부과 (R4)",
  "why.demoted": "예약을 잃은 이유: {cause}. 그 뒤 1위: {first_lab} 연구실의 작업 {first} ({usage} TFLOP-s). 예약은 1위 작업만 유지합니다 (R3).",
  "why.release.demoted": "해제 — 더 이상 1위가 아님", "why.release.swap": "다른 곳에서 실행됨",
  "why.release.dispatched": "이 GPU에서 실행됨", "why.release.cancelled": "작업이 취소됨",
  "why.release.maintenance": "점검", "why.release.capacity": "배치의 GPU가 줄어듦",
  "why.phase.personal_queue": "개인 대기열", "why.phase.global_queue": "전역 대기열",
  "why.phase.reserving": "예약", "why.phase.starting": "배정 → 시작", "why.phase.running": "실행",
  "why.phase.cancelling": "취소 중", "why.phase.retry_decision": "OOM 재시도 결정",
  "why.reason.ConcurrencyLimit": "슬롯을 기다림: {user}의 작업 {jobs}이(가) 슬롯을 모두 쓰고 있습니다 (S1)",
  "why.reason.ConcurrencyLimit.none": "슬롯을 기다림: {user}의 작업 중 슬롯을 쓰는 것은 없지만 동시 실행 한도(max_active_jobs)가 지금은 더 허용하지 않습니다 (S1)",
  "why.reason.MinVram": "{min_vram} GB 이상인 GPU를 기다림: 더 작은 GPU만 비어 있습니다 (D7)",
  "why.reason.Dependency": "의존하는 작업을 기다립니다 — 슬롯은 차지하지 않습니다 (Q8)",
  "why.reason.Held": "보류되어 있습니다: `jpu release ID`로 풀 수 있습니다 (Q9)",
  "why.reason.ArrayThrottle": "배열의 %N을 기다림: 작업 {jobs}이(가) 배열이 동시에 쓸 수 있는 슬롯을 모두 쓰고 있습니다 — 그중 하나가 끝나면 실행됩니다 (Q7)",
  "why.cause.submitted": "제출됨 — 모든 작업은 먼저 사용자의 개인 대기열에 들어갑니다 (Q4)",
  "why.cause.promoted_free_slot": "{user}에게 빈 슬롯이 있어 ({count}개의 다른 작업이 슬롯 사용) {after} 전역 대기열로 올라감",
  "why.cause.promoted_slot_freed": "{jobs} 작업이 끝나 {user}의 슬롯이 비어 {waited} 뒤 전역 대기열로 올라감 (Q5)",
  "why.cause.retried": "{tier} ({vram} GB)에서 GPU 메모리가 부족해 {min_vram} GB 이상인 GPU로 재시도 (X8)",
  "why.cause.retry_declined.max_attempts": "재시도 없음: 허용된 마지막 시도에서 GPU 메모리 부족 (X8)",
  "why.cause.retry_declined.no_fit": "재시도 없음: 필요한 {min_vram} GB를 가진 GPU가 없음 (X8)",
  "why.cause.reserved": "1위이고 GPU {needed}개가 필요한데 {node} ({tier})에 {count}개만 비어 있어 나머지가 빌 때까지 잡아 둠 (R1)",
  "why.cause.reservation_grown": "{node}의 GPU {gpus}가 비어{freed} 이제 {needed}개 중 {count}개를 잡고 있음 (R2)",
  "why.cause.reservation_shrunk.lost": "{node}의 GPU {gpus}가 꺼지거나 다른 곳에 쓰여 {needed}개 중 {count}개만 남음 (R5)",
  "why.cause.reservation_shrunk.yielded": "그곳에서만 시작할 수 있는 상위 작업에 {node}의 GPU {gpus}를 양보해 {needed}개 중 {count}개를 잡고 있음 (R6)",
  "why.cause.reservation_shrunk.lent": "어차피 시작할 수 없는 동안 제한 시간이 그 전에 끝나는 {jobs}에게 {node}의 GPU {gpus}를 빌려줌, 끝나면 돌아옴; {needed}개 중 {count}개를 잡고 있음 (R7)",
  "why.cause.released_demoted": "더 이상 1위가 아님: {other_lab} 연구실의 작업 {jobs}이(가) 1위가 되었고, 예약은 1위 작업만 유지합니다 (R3)",
  "why.cause.released_maintenance": "점검이 시작되어 모든 예약이 해제됨 (M1)",
  "why.cause.released_capacity": "{node}의 배치가 GPU를 잃었거나 티어가 꺼져 예약이 해제됨 (R5)",
  "why.cause.released_cancelled": "취소되어 예약이 해제됨",
  "why.cause.released_to_run": "{node}에 필요한 GPU {needed}개가 모두 비어 예약한 자리에서 시작함",
  "why.cause.released_swap": "다른 곳의 GPU가 먼저 비어 그곳에서 시작하고 {node}의 예약은 놓음 (R4)",
  "why.cause.dispatched": "{node} ({tier})의 GPU {gpus}가 비어 있었음{freed}",
  "why.cause.dispatched_reserved": "{node}에 예약한 GPU의 마지막 하나가 비어{freed} {needed}개가 모두 확보됨 (R2)",
  "why.cause.dispatched_lent": "제한 시간이 {jobs}이(가) 시작할 수 있는 때보다 먼저 끝나 {jobs}의 예약이 잡고 있던 {node}의 GPU {gpus}를 빌려 시작함 (R7)",
  "why.cause.started": "{node}가 작업을 시작함",
  "why.cause.completed": "명령이 종료 코드 0으로 끝남",
  "why.cause.exited": "명령이 종료 코드 {code}로 끝남",
  "why.cause.out_of_memory": "{tier} ({vram} GB)에서 GPU 메모리가 부족함 (X7)",
  "why.cause.timed_out": "시간 제한을 넘김",
  "why.cause.failed": "실패: {reason}",
  "why.cause.cancelled": "취소됨",
  "why.cause.cancel_requested": "{by}이(가) 취소함",
  "why.cause.held": "{by}이(가) 보류함: 풀릴 때까지 올라가지 않습니다 (Q9)",
  "why.cause.released": "{by}이(가) 보류를 풂: 다시 올라갈 수 있습니다 (Q9)",
  "why.cause.dependency_never_satisfied": "의존하는 작업이 끝나 의존 조건을 결코 만족할 수 없게 됨 (Q8)",
  "why.cause.dependency_never_satisfied.parent": "의존하는 작업 {jobs}이(가) {state}(으)로 끝나 의존 조건을 결코 만족할 수 없게 됨 (Q8)",
  "why.cause.dependency_never_satisfied.unknown": "의존하는 작업 {jobs}을(를) 알 수 없어 의존 조건을 결코 만족할 수 없게 됨 (Q8)",
  "why.cause.other_entered": "{job} ({lab}) 작업이 전역 대기열에 들어옴",
  "why.cause.other_entered_ahead": "{job} ({lab}) 작업이 앞 순위로 전역 대기열에 들어옴: 사용량이 적은 연구실이 먼저입니다 (D1)",
  "why.cause.other_retried": "{job} ({lab}) 작업이 {min_vram} GB 이상인 GPU로 재시도하려고 돌아옴 (X8)",
  "why.cause.other_ended": "{job} ({lab}) 작업이 끝나 {node}의 GPU {gpus}가 비었음",
  "why.cause.other_left": "{job} ({lab}) 작업이 실행되기 전에 대기열을 떠남",
  "why.cause.other_dispatched": "{job} ({lab}) 작업이 {node}의 GPU {gpus}를 가져감",
  "why.cause.other_reserved": "{job} ({lab}) 작업이 {node}의 GPU {gpus}를 예약함 (R1)",
  "why.cause.other_reservation_changed": "{job} ({lab}) 작업의 {node} 예약이 GPU {gpus}로 바뀜",
  "why.cause.other_released": "{job} ({lab}) 작업이 {node}의 예약을 놓음: {why}",
  "why.cause.other_cancelled": "{by}이(가) {job} ({lab}) 작업을 취소함",
  "why.cause.charged": "{job} 작업의 사용량이 {lab}에 부과됨",
  "why.cause.initial_usage": "{lab}의 시작 사용량이 기록됨",
  "why.cause.maintenance_draining": "관리자 {by}이(가) 점검을 시작함{message}: 새로 배정하지 않습니다 (M1)",
  "why.cause.maintenance_recovery": "점검: 사용자 작업이 끝나 LLM 백필을 회수하는 중 (M2)",
  "why.cause.maintenance_active": "점검 진행 중 (M3)",
  "why.cause.maintenance_ended": "관리자 {by}이(가) 점검을 끝냄{message}: 배정을 다시 시작합니다",
  "why.cause.node_changed": "노드 {node}의 GPU 상태가 바뀜 ({state}, {count}개 꺼짐)",
  "why.cause.backfill_ended": "{node}의 GPU {gpus}에서 LLM 백필이 멈춤 ({reason})",
  "why.at_once": "곧바로",
  "why.after": "{waited} 뒤",
  "why.freed_by": " ({jobs} 작업이 비움)",
  "why.message": ": “{message}”",
  "why.usage": " ({lab} 사용량: {usage} TFLOP-s)",
  "why.charged": " — {lab}에 {charge} TFLOP-s 부과 (현재 {usage})",
});

applyStrings();  // console.js applied its strings before these were added

const why = { id: null, wait: null };  // the explanation loaded for the job shown
const reasonText = (r) => t(has(`reason.${r}.t`) ? `reason.${r}.t` : `reason.${r}`);

// The cause in words: one sentence per kind (jpu.explain.wait.CauseKind), or per kind and
// reason, as jpu.cli.why renders it; never the event's type.
function whyCause(c) {
  if (!c) return "";
  // Q8: the parent and how it ended, when the story knows them (as jpu.cli.why)
  const sub = c.kind === "dependency_never_satisfied" && (c.jobs || []).length
    ? (c.state ? "parent" : "unknown") : c.reason;
  const key = has(`why.cause.${c.kind}.${sub}`) ? `why.cause.${c.kind}.${sub}` : `why.cause.${c.kind}`;
  if (!has(key)) return "";
  const jobs = (c.jobs || []).join(", "), waited = fmtDur(c.waited_s || 0);
  let text = tf(key, {
    job: c.job_id || "", lab: c.lab || "", jobs, other_lab: c.other_lab || "", user: c.user || "",
    node: c.node || "", tier: c.tier || "", gpus: (c.gpus || []).join(","), count: c.count,
    needed: c.needed, vram: c.vram_gb, min_vram: c.min_vram_gb, code: c.code, reason: c.reason || "",
    why: has("why.release." + c.reason) ? t("why.release." + c.reason) : (c.reason || ""),
    state: c.state || "", by: c.by || "", waited,
    message: c.message ? tf("why.message", { message: c.message }) : "",
    after: (c.waited_s || 0) < 1 ? t("why.at_once") : tf("why.after", { waited }),
    freed: jobs ? tf("why.freed_by", { jobs }) : "",
  });
  if (c.kind === "other_entered_ahead" && c.lab_usage !== null && c.lab_usage !== undefined) {
    text += tf("why.usage", { lab: c.lab, usage: fmtNum(c.lab_usage) });
  }
  if (c.charge !== null && c.charge !== undefined && c.lab) {
    text += tf("why.charged", { lab: c.lab, charge: fmtNum(c.charge), usage: fmtNum(c.lab_usage) });
  }
  return text;
}

// The step's pending reason; the personal queue's names the jobs holding the slots (S1) or the
// array's tasks holding its %N (Q7), MinVram the VRAM floor (D7).
function whyReason(s, w) {
  if (!s.pending_reason) return t("why.dispatching");
  const jobs = (s.slot_holders || []).join(", ");
  if (["ConcurrencyLimit", "MinVram", "ArrayThrottle"].includes(s.pending_reason)) {
    const key = s.pending_reason === "ConcurrencyLimit" && !jobs ? "ConcurrencyLimit.none" : s.pending_reason;
    return tf("why.reason." + key, { user: w.user, jobs, min_vram: s.min_vram_gb });
  }
  return reasonText(s.pending_reason);
}

function whyNodes(w) {
  const phases = Object.entries(w.phases).map(([k, s]) => `${t("why.phase." + k)} ${fmtDur(s)}`).join(" · ");
  const out = [h("p", { class: "why-phases" }, tf("why.phases", { phases }))];
  const steps = w.steps.map((s) => {
    let head = `${fmtTime(s.at)} — ${has("state." + s.state) ? t("state." + s.state) : s.state}`;
    if (s.rank !== null) {
      head += ", " + tf("why.rank", { rank: s.rank, n: s.queue_length }) + " — " + whyReason(s, w);
    } else if (s.pending_reason) {
      head += " — " + whyReason(s, w);
    }
    const items = [h("div", {}, head)];
    const cause = whyCause(s.cause);
    if (cause) items.push(h("div", { class: "muted" }, tf("why.because", { cause })));
    else if (s.sampled) items.push(h("div", { class: "muted" }, t("why.sampled")));
    if (s.ahead.length) {
      const labs = s.ahead.map((a) => tf("why.ahead_lab", { lab: a.lab, usage: fmtNum(a.usage), jobs: a.jobs })).join(", ");
      items.push(h("div", { class: "muted" }, tf("why.ahead", { labs })));
    }
    return h("li", { "data-rank": s.rank ?? "" }, items);
  });
  out.push(h("ol", { class: "timeline why-steps" }, steps));
  if (!w.reservations.length) out.push(h("p", {}, t("why.no_res")));
  for (const r of w.reservations) {
    const gpus = "GPU " + r.gpus.join(",");
    if (r.reason === null) {
      out.push(h("p", {}, tf("why.res_held", { gpus, node: r.node, tier: r.tier, start: fmtTime(r.started_at) })));
      continue;
    }
    const cost = tf(r.charged_now ? "why.res_now" : "why.res_later", { cost: fmtNum(r.cost), lab: w.lab });
    const end = `${t("why.release." + r.reason)}; ${cost}`;
    out.push(h("p", { class: "why-reservation" }, tf("why.res", {
      gpus, node: r.node, tier: r.tier, start: fmtTime(r.started_at), dur: fmtDur(r.ended_at - r.started_at), end })));
    if (r.demoted_by) {
      out.push(h("p", { class: "why-demoted" }, tf("why.demoted", {
        cause: whyCause(r.demoted_by), first: r.overtaken_by, first_lab: r.overtaken_by_lab,
        usage: fmtNum(r.overtaken_by_usage) })));
    }
  }
  return out;
}

// Called by the job page's draw (console.js loadJob) for the job shown.
function drawWhy(jobId) {
  const box = $("job-why"), button = $("job-why-load");
  if (why.id !== jobId) { why.id = jobId; why.wait = null; }
  button.onclick = async () => {
    try {
      const w = await api("/v1/jobs/" + encodeURIComponent(jobId) + "/wait");
      if (why.id === jobId) { why.wait = w; showError(null); drawWhy(jobId); }
    } catch (e) { showError(e); }
  };
  if (why.wait === null) { clearRows(box); return; }
  setRows(box, JSON.stringify(why.wait), () => whyNodes(why.wait));
}

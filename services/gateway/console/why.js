// "Why it waited" on the job page (SPEC U4, issue 14): GET /v1/jobs/{id}/wait in sentences, in
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
  "why.own.JobSubmitted": "it was submitted", "why.own.JobPromoted": "it entered the global queue",
  "why.own.ReservationStarted": "it started a reservation",
  "why.own.ReservationGrown": "its reservation took another GPU",
  "why.own.ReservationReleased": "its reservation was released",
  "why.own.JobDispatched": "it was dispatched", "why.own.JobStarted": "it started",
  "why.own.JobEnded": "it ended",
  "why.cause.JobEnded": "{job} ({lab}) ended", "why.cause.JobPromoted": "{job} ({lab}) entered the global queue",
  "why.cause.JobDispatched": "{job} ({lab}) was dispatched",
  "why.cause.ReservationStarted": "{job} ({lab}) started a reservation",
  "why.cause.ReservationReleased": "{job} ({lab}) released its reservation",
  "why.cause.UsageCharged": "{lab} was charged", "why.cause.other": "{event} ({job})",
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
  "why.own.JobSubmitted": "제출됨", "why.own.JobPromoted": "전역 대기열에 들어감",
  "why.own.ReservationStarted": "예약을 시작함", "why.own.ReservationGrown": "예약에 GPU가 더해짐",
  "why.own.ReservationReleased": "예약이 해제됨", "why.own.JobDispatched": "배정됨",
  "why.own.JobStarted": "시작됨", "why.own.JobEnded": "끝남",
  "why.cause.JobEnded": "{job} ({lab}) 작업이 끝남", "why.cause.JobPromoted": "{job} ({lab}) 작업이 전역 대기열에 들어옴",
  "why.cause.JobDispatched": "{job} ({lab}) 작업이 배정됨",
  "why.cause.ReservationStarted": "{job} ({lab}) 작업이 예약을 시작함",
  "why.cause.ReservationReleased": "{job} ({lab}) 작업의 예약이 해제됨",
  "why.cause.UsageCharged": "{lab}에 사용량이 부과됨", "why.cause.other": "{event} ({job})",
  "why.charged": " — {lab}에 {charge} TFLOP-s 부과 (현재 {usage})",
});

applyStrings();  // console.js applied its strings before these were added

const why = { id: null, wait: null };  // the explanation loaded for the job shown
const reasonText = (r) => t(has(`reason.${r}.t`) ? `reason.${r}.t` : `reason.${r}`);

function whyCause(c, jobId) {
  if (!c) return "";
  const own = c.job_id === jobId && has("why.own." + c.event);
  let text = own ? t("why.own." + c.event)
    : tf(has("why.cause." + c.event) ? "why.cause." + c.event : "why.cause.other",
      { job: c.job_id || "", lab: c.lab || "", event: c.event });
  if (c.charge !== null && c.charge !== undefined && c.lab) {
    text += tf("why.charged", { lab: c.lab, charge: fmtNum(c.charge), usage: fmtNum(c.lab_usage) });
  }
  return text;
}

function whyNodes(w) {
  const phases = Object.entries(w.phases).map(([k, s]) => `${t("why.phase." + k)} ${fmtDur(s)}`).join(" · ");
  const out = [h("p", { class: "why-phases" }, tf("why.phases", { phases }))];
  const steps = w.steps.map((s) => {
    let head = `${fmtTime(s.at)} — ${has("state." + s.state) ? t("state." + s.state) : s.state}`;
    if (s.rank !== null) {
      head += ", " + tf("why.rank", { rank: s.rank, n: s.queue_length }) + " — "
        + (s.pending_reason ? reasonText(s.pending_reason) : t("why.dispatching"));
    }
    const items = [h("div", {}, head)];
    const cause = whyCause(s.cause, w.job_id);
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
        cause: whyCause(r.demoted_by, w.job_id), first: r.overtaken_by, first_lab: r.overtaken_by_lab,
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

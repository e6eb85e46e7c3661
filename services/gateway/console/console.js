// JPU-Share web console (SPEC U2). Vanilla JS, no build step; talks only to the REST API (/v1).
// The token the user types is kept in localStorage and sent as `Authorization: Bearer <token>`.
// All text reaches the page through textContent / DOM nodes, never innerHTML (no HTML injection).
"use strict";

const STRINGS = {
  en: {
    "nav.queue": "Queue", "nav.pool": "GPU pool", "nav.labs": "Lab usage", "nav.jobs": "Jobs",
    "nav.submit": "Submit", "token.placeholder": "API token", "token.save": "Save",
    "token.missing": "Type your API token (top right) to see the cluster.",
    "token.rejected": "This API token was not accepted: it is mistyped, revoked or expired. Paste a valid one top right (it starts as you received it, e.g. demo-bcg-alice); an admin creates tokens with `jpu-admin token create USER`.",
    "submit.env_bad": "Environment line {n} (\"{line}\") has no \"=\": write KEY=VALUE, one per line. Nothing was submitted.",
    "queue.title": "Global queue", "queue.empty": "The queue is empty.",
    "pool.title": "GPU pool by placement", "labs.title": "Lab usage (decayed)",
    "jobs.title": "Jobs", "jobs.id": "job id", "jobs.open": "Open", "jobs.empty": "No jobs.",
    "job.title": "Job", "job.cancel": "Cancel job", "job.timeline": "Event timeline",
    "job.cancel_sent": "Cancellation requested.",
    "submit.title": "Submit a job", "submit.name": "Name", "submit.gpus": "GPUs",
    "submit.tiers": "Tiers (comma separated, empty = any)", "submit.time": "Time limit (s)",
    "submit.command": "Command (shell script)", "submit.env": "Environment (KEY=VALUE per line)",
    "submit.go": "Submit", "submit.ok": "Submitted job",
    "col.rank": "Rank", "col.job": "Job", "col.lab": "Lab", "col.user": "User", "col.gpus": "GPUs",
    "col.state": "State", "col.lab_usage": "Lab usage (TFLOP-s)", "col.reason": "Pending reason",
    "col.usage_now": "Usage now", "col.raw": "Raw value", "col.as_of": "As of",
    "col.running": "Running", "col.queued": "Queued", "col.name": "Name", "col.attempt": "Attempt",
    "gpu.idle": "idle", "gpu.running": "running", "gpu.reserved": "reserved",
    "gpu.backfill": "LLM backfill", "gpu.down": "down",
    "pool.capacity": "capacity", "pool.idle": "idle",
    "maint.DRAINING": "Maintenance: draining. New submissions are refused; running jobs finish.",
    "maint.BACKFILL_RECOVERY": "Maintenance: reclaiming LLM backfill GPUs.",
    "maint.ACTIVE": "Maintenance in progress. Submissions are refused until it ends.",
    "maint.since": "since",
    "chart.empty": "No usage recorded yet.",
    "f.state": "State", "f.attempt": "Attempt", "f.user": "User", "f.lab": "Lab",
    "f.num_gpus": "GPUs", "f.rank": "Rank", "f.pending_reason": "Pending reason",
    "f.placement": "Placement", "f.reservation": "Reservation", "f.usage_charged": "Usage charged",
    "f.backend_job_id": "Slurm job id", "f.isolation": "Isolation", "f.exit_code": "Exit code",
    "f.reason": "End reason", "f.submitted_at": "Submitted", "f.queue_entered_at": "Entered queue",
    "f.ended_at": "Ended", "f.tiers": "Tiers", "f.min_vram_gb": "Min VRAM (GB)",
    "f.command": "Command", "f.workdir": "Working directory",
    "f.oom_retry": "OOM retry", "f.raised_by_oom": "raised by the OOM retry, not set by you",
    "job.output": "Output", "log.attempt": "Attempt", "log.none": "No output yet for this attempt.",
    "log.running": "Updating while the attempt runs…", "log.ended": "The attempt has ended.",
    "log.truncated": "Showing the last part only; `jpu logs ID` prints all of it.",
  },
  ko: {
    "nav.queue": "대기열", "nav.pool": "GPU 풀", "nav.labs": "연구실 사용량", "nav.jobs": "작업",
    "nav.submit": "제출", "token.placeholder": "API 토큰", "token.save": "저장",
    "token.missing": "오른쪽 위에 API 토큰을 입력하면 클러스터 현황을 볼 수 있습니다.",
    "token.rejected": "이 API 토큰은 받아들여지지 않았습니다: 잘못 입력했거나 폐기되었거나 만료되었습니다. 오른쪽 위에 올바른 토큰을 붙여 넣으세요 (받은 그대로, 예: demo-bcg-alice). 관리자는 `jpu-admin token create USER`로 토큰을 만듭니다.",
    "submit.env_bad": "환경 변수 {n}번째 줄(\"{line}\")에 \"=\"가 없습니다: 한 줄에 KEY=VALUE로 쓰세요. 아무것도 제출하지 않았습니다.",
    "queue.title": "전역 대기열", "queue.empty": "대기 중인 작업이 없습니다.",
    "pool.title": "배치(placement)별 GPU 풀", "labs.title": "연구실 사용량 (반감기 적용)",
    "jobs.title": "작업", "jobs.id": "작업 ID", "jobs.open": "열기", "jobs.empty": "작업이 없습니다.",
    "job.title": "작업", "job.cancel": "작업 취소", "job.timeline": "이벤트 타임라인",
    "job.cancel_sent": "취소를 요청했습니다.",
    "submit.title": "작업 제출", "submit.name": "이름", "submit.gpus": "GPU 수",
    "submit.tiers": "티어 (쉼표로 구분, 비우면 전체)", "submit.time": "시간 제한 (초)",
    "submit.command": "명령 (셸 스크립트)", "submit.env": "환경 변수 (한 줄에 KEY=VALUE)",
    "submit.go": "제출", "submit.ok": "제출된 작업",
    "col.rank": "순위", "col.job": "작업", "col.lab": "연구실", "col.user": "사용자",
    "col.gpus": "GPU", "col.state": "상태", "col.lab_usage": "연구실 사용량 (TFLOP-s)",
    "col.reason": "대기 사유", "col.usage_now": "현재 사용량", "col.raw": "기록값",
    "col.as_of": "기준 시각", "col.running": "실행 중", "col.queued": "대기 중",
    "col.name": "이름", "col.attempt": "시도",
    "gpu.idle": "유휴", "gpu.running": "실행 중", "gpu.reserved": "예약됨",
    "gpu.backfill": "LLM backfill", "gpu.down": "중단",
    "pool.capacity": "용량", "pool.idle": "유휴",
    "maint.DRAINING": "점검 모드: 드레이닝 중. 새 작업 제출이 차단되며 실행 중인 작업은 정상 완료됩니다.",
    "maint.BACKFILL_RECOVERY": "점검 모드: LLM backfill GPU를 회수하고 있습니다.",
    "maint.ACTIVE": "점검 진행 중입니다. 점검이 끝날 때까지 작업 제출이 차단됩니다.",
    "maint.since": "시작",
    "chart.empty": "아직 기록된 사용량이 없습니다.",
    "f.state": "상태", "f.attempt": "시도", "f.user": "사용자", "f.lab": "연구실",
    "f.num_gpus": "GPU 수", "f.rank": "순위", "f.pending_reason": "대기 사유",
    "f.placement": "배치", "f.reservation": "예약", "f.usage_charged": "부과된 사용량",
    "f.backend_job_id": "Slurm 작업 ID", "f.isolation": "격리", "f.exit_code": "종료 코드",
    "f.reason": "종료 사유", "f.submitted_at": "제출 시각", "f.queue_entered_at": "대기열 진입",
    "f.ended_at": "종료 시각", "f.tiers": "티어", "f.min_vram_gb": "최소 VRAM (GB)",
    "f.command": "명령", "f.workdir": "작업 디렉터리",
    "f.oom_retry": "OOM 재시도", "f.raised_by_oom": "OOM 재시도로 올라간 값이며 사용자가 정한 값이 아닙니다",
    "job.output": "출력", "log.attempt": "시도", "log.none": "이 시도의 출력이 아직 없습니다.",
    "log.running": "실행 중인 동안 자동으로 갱신됩니다…", "log.ended": "이 시도는 끝났습니다.",
    "log.truncated": "마지막 부분만 표시합니다. 전체는 `jpu logs ID`로 볼 수 있습니다.",
  },
};

const state = {
  lang: localStorage.getItem("jpu.lang") || ((navigator.language || "").startsWith("ko") ? "ko" : "en"),
  token: localStorage.getItem("jpu.token") || "",
  timer: null,
  log: null, // the log pane of the job page (see refreshLog)
};
const $ = (id) => document.getElementById(id);
const t = (key) => (STRINGS[state.lang] || STRINGS.en)[key] || STRINGS.en[key] || key;

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = v; else if (k === "href") el.href = v; else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

const fmtNum = (x) => (x === null || x === undefined ? "" : Number(x).toLocaleString(undefined, { maximumFractionDigits: 1 }));
const fmtTime = (s) => (s ? new Date(s * 1000).toLocaleString(state.lang === "ko" ? "ko-KR" : undefined) : "");

async function api(path, options = {}) {
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  if (state.token) headers.Authorization = "Bearer " + state.token;
  if (options.body) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, Object.assign({}, options, { headers }));
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const e = (body && body.error) || {};
    const err = new Error(`${resp.status} ${e.code || ""}: ${e.message || resp.statusText}`);
    err.status = resp.status; err.details = e.details;
    throw err;
  }
  return body;
}

function showError(err) {
  const el = $("error");
  if (!err) { el.hidden = true; return; }
  // 401: no token yet, or one the gateway refused (mistyped, revoked): say which, and the fix
  el.textContent = err.status === 401 ? t(state.token ? "token.rejected" : "token.missing")
    : String(err.message || err);
  el.hidden = false;
}

function applyStrings() {
  document.documentElement.lang = state.lang;
  document.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = t(el.dataset.i18n); });
  document.querySelectorAll("[data-i18n-placeholder]").forEach((el) => { el.placeholder = t(el.dataset.i18nPlaceholder); });
  $("lang-toggle").textContent = state.lang === "ko" ? "English" : "한국어";
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

// --- views -------------------------------------------------------------------------------------
async function viewQueue() {
  const q = await api("/v1/queue");
  const rows = (q.queue || []).map((j) => h("tr", {},
    h("td", { class: "num" }, j.rank ?? "–"),
    h("td", {}, h("a", { href: "#/job/" + encodeURIComponent(j.job_id) }, j.job_id)),
    h("td", {}, j.lab), h("td", {}, j.user), h("td", { class: "num" }, j.num_gpus),
    h("td", {}, j.state), h("td", { class: "num" }, fmtNum(j.lab_usage)),
    h("td", {}, j.pending_reason || "")));
  $("queue-rows").replaceChildren(...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 8 }, t("queue.empty")))]));
}

function gpuClass(s) { return s.startsWith("job:") ? "job" : s.split(":")[0]; }

async function viewPool() {
  const p = await api("/v1/placements");
  const cards = (p.placements || []).map((pl) => h("div", { class: "card" },
    h("h3", {}, `${pl.node} · ${pl.tier}`),
    h("div", { class: "meta" }, `${t("pool.capacity")} ${pl.capacity} · ${t("pool.idle")} ${pl.idle}`),
    h("div", {}, (pl.gpus || []).map((g) => h("span", {
      class: "gpu " + gpuClass(g.state), title: `#${g.index} ${g.state}` }))),
    h("div", { class: "meta" },
      (pl.running || []).map((r) => h("div", {}, `${t("gpu.running")}: `,
        h("a", { href: "#/job/" + encodeURIComponent(r.job_id) }, r.job_id), ` [${r.gpus.join(",")}]`)),
      (pl.reserved || []).map((r) => h("div", {}, `${t("gpu.reserved")}: `,
        h("a", { href: "#/job/" + encodeURIComponent(r.job_id) }, r.job_id), ` [${r.gpus.join(",")}]`)),
      (pl.backfilled || []).map((b) => h("div", {}, `${t("gpu.backfill")}: #${b.gpu}`)))));
  $("pool-cards").replaceChildren(...cards);
}

const COLORS = ["#2456c8", "#c62828", "#2e7d32", "#f2a900", "#7e57c2", "#00838f", "#6d4c41"];

function usageChart(hist) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  const W = 800, H = 240, L = 70, B = 20;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const labs = Object.keys(hist.series || {});
  const all = labs.flatMap((l) => hist.series[l]);
  if (!all.length) { const p = h("p", {}, t("chart.empty")); return p; }
  const x0 = hist.start, x1 = Math.max(hist.end, x0 + 1);
  const ymax = Math.max(1, ...all.map((p) => p[1]));
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - 10);
  const sy = (y) => H - B - (y / ymax) * (H - B - 10);
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.append(el); return el;
  };
  add("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: "#999" });
  add("line", { x1: L, y1: 10, x2: L, y2: H - B, stroke: "#999" });
  add("text", { x: 4, y: 16, "font-size": 11 }, fmtNum(ymax));
  add("text", { x: L, y: H - 4, "font-size": 11 }, fmtTime(x0));
  add("text", { x: W - 160, y: H - 4, "font-size": 11 }, fmtTime(x1));
  labs.forEach((lab, i) => {
    const color = COLORS[i % COLORS.length];
    const pts = hist.series[lab].map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
    add("polyline", { points: pts, fill: "none", stroke: color, "stroke-width": 2 });
    add("text", { x: L + 10 + i * 90, y: 24, fill: color, "font-size": 12 }, lab);
  });
  return svg;
}

async function viewLabs() {
  const [labs, hist] = await Promise.all([api("/v1/labs"), api("/v1/usage/history")]);
  $("lab-rows").replaceChildren(...(labs.labs || []).map((l) => h("tr", {},
    h("td", {}, l.lab), h("td", { class: "num" }, fmtNum(l.usage)),
    h("td", { class: "num" }, fmtNum(l.raw_value)), h("td", {}, fmtTime(l.as_of)),
    h("td", { class: "num" }, l.running), h("td", { class: "num" }, l.queued))));
  $("usage-chart").replaceChildren(usageChart(hist));
}

async function viewJobs() {
  const r = await api("/v1/jobs?limit=100");
  const rows = (r.jobs || []).map((j) => h("tr", {},
    h("td", {}, h("a", { href: "#/job/" + encodeURIComponent(j.id) }, j.id)),
    h("td", {}, j.name), h("td", {}, j.user), h("td", { class: "num" }, j.num_gpus),
    h("td", {}, j.state), h("td", { class: "num" }, j.attempt)));
  $("job-rows").replaceChildren(...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 6 }, t("jobs.empty")))]));
}

function describe(key, v) {
  if (v === null || v === undefined || v === "") return null;
  if (key === "placement") return `${v.node} · ${v.tier} [${(v.gpus || []).join(",")}]`;
  if (key === "reservation") return `${v.node} · ${v.tier} [${(v.gpus || []).join(",")}] ${t("maint.since")} ${fmtTime(v.since)}`;
  if (key.endsWith("_at")) return fmtTime(v);
  if (key === "usage_charged") return fmtNum(v) + " TFLOP-s";
  if (Array.isArray(v)) return v.join(", ");
  return String(v);
}

const JOB_FIELDS = ["state", "attempt", "user", "lab", "num_gpus", "tiers", "min_vram_gb", "rank",
  "pending_reason", "placement", "reservation", "usage_charged", "backend_job_id", "isolation",
  "exit_code", "reason", "submitted_at", "queue_entered_at", "ended_at", "workdir"];

// --- the log pane (SPEC U5): GET /v1/jobs/{id}/logs of the selected attempt and stream -----------
// The first read is the last LOG_TAIL bytes (offset < 0); then only what was appended since
// (offset = Jpu-Log-End), every 2 s while the attempt runs, until Jpu-Log-Ended says it is final.
const LOG_TAIL = 64 * 1024, LOG_KEEP = 256 * 1024;

function resetLog(jobId) {
  state.log = { job: jobId, pinned: false, attempt: null, stream: "stdout", key: null, text: "",
    next: null, ended: false, missing: false, truncated: false, error: "", busy: false,
    latest: null, decoder: null };
  $("job-log").textContent = "";
  $("job-log-status").textContent = "";
  $("job-log-attempt").replaceChildren();
  document.querySelectorAll("input[name=job-log-stream]").forEach((r) => { r.checked = r.value === "stdout"; });
}

function drawLog() {
  const L = state.log, pre = $("job-log");
  if (!L) return;
  const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
  if (pre.textContent !== L.text) pre.textContent = L.text;
  if (atBottom) pre.scrollTop = pre.scrollHeight;  // keep following the end unless scrolled up
  const parts = [L.error || (L.missing ? t("log.none") : L.ended ? t("log.ended") : t("log.running"))];
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
      truncated: false, error: "", decoder: new TextDecoder("utf-8") });
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
    if (key !== L.key) return;  // another attempt or stream was chosen meanwhile
    if (resp.ok) {
      const bytes = new Uint8Array(await resp.arrayBuffer());
      if (L.next === null && Number(resp.headers.get("Jpu-Log-Start")) > 0) L.truncated = true;
      L.text += L.decoder.decode(bytes, { stream: true });
      if (L.text.length > LOG_KEEP) { L.text = L.text.slice(-LOG_KEEP); L.truncated = true; }
      L.next = Number(resp.headers.get("Jpu-Log-End"));
      L.ended = resp.headers.get("Jpu-Log-Ended") === "true";
      L.missing = false; L.error = "";
    } else if (resp.status === 404) {
      L.missing = true;  // not started yet; an attempt that is over will never have any
      L.ended = latest.terminal || attempt < latest.attempt;
    } else {
      const e = ((await resp.json().catch(() => ({}))).error) || {};
      L.error = `${resp.status} ${e.code || ""}: ${e.message || resp.statusText}`;
    }
  } catch (e) {
    L.error = String(e.message || e);
  } finally {
    L.busy = false;
  }
  drawLog();
}

async function viewJob(id) {
  if (!state.log || state.log.job !== id) resetLog(id);  // never another job's output
  const [job, ev] = await Promise.all([
    api("/v1/jobs/" + encodeURIComponent(id)),
    api("/v1/jobs/" + encodeURIComponent(id) + "/events")]);
  $("job-title").textContent = job.id;
  const items = JOB_FIELDS.flatMap((k) => {
    let v = describe(k, job[k]);
    // X8 raises min_vram_gb after an OOM: never show it as if the user had set it
    if (k === "min_vram_gb" && v !== null && "min_vram_gb_requested" in job
        && job.min_vram_gb_requested !== job.min_vram_gb) v += ` (${t("f.raised_by_oom")})`;
    return v === null ? [] : [h("dt", {}, t("f." + k)), h("dd", {}, v)];
  });
  (job.oom_explanation || []).forEach((s) => items.push(h("dt", {}, t("f.oom_retry")), h("dd", {}, s)));
  if (job.command) items.push(h("dt", {}, t("f.command")), h("dd", {}, h("pre", {}, job.command)));
  $("job-fields").replaceChildren(...items);
  $("job-cancel").hidden = ["COMPLETED", "FAILED", "CANCELLED"].includes(job.state);
  $("job-cancel").onclick = async () => {
    try { await api(`/v1/jobs/${encodeURIComponent(id)}/cancel`, { method: "POST" }); showError(null);
      alert(t("job.cancel_sent")); render(); } catch (e) { showError(e); }
  };
  $("job-events").replaceChildren(...(ev.events || []).map((e) => {
    const { type, ts, seq, event_id, schema_version, job_id, ...rest } = e;
    return h("li", {}, h("span", { class: "t" }, fmtTime(ts)), h("strong", {}, type), " ",
      h("code", {}, JSON.stringify(rest)));
  }));
  await refreshLog(job);
}

async function submitJob(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const body = { name: f.get("name"), command: f.get("command"), num_gpus: Number(f.get("num_gpus")) };
  const tiers = String(f.get("tiers") || "").split(",").map((s) => s.trim()).filter(Boolean);
  if (tiers.length) body.tiers = tiers;
  if (f.get("time_limit_s")) body.time_limit_s = Number(f.get("time_limit_s"));
  const out = $("submit-result");
  // KEY=VALUE per line; a line without "=" is the user's mistake to see, never dropped silently
  const env = {};
  const lines = String(f.get("env") || "").split("\n");
  for (let n = 0; n < lines.length; n++) {
    const l = lines[n].trim();
    if (!l) continue;
    const i = l.indexOf("=");
    if (i <= 0) {
      out.textContent = "";
      showError(new Error(t("submit.env_bad").replace("{n}", String(n + 1)).replace("{line}", l)));
      return;
    }
    env[l.slice(0, i)] = l.slice(i + 1);
  }
  if (Object.keys(env).length) body.env = env;
  try {
    const job = await api("/v1/jobs", { method: "POST", body: JSON.stringify(body),
      headers: { "Idempotency-Key": crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) } });
    out.replaceChildren(`${t("submit.ok")} `, h("a", { href: "#/job/" + encodeURIComponent(job.id) }, job.id),
      ` (${job.state})`);
    showError(null);
  } catch (e) { out.textContent = ""; showError(e); }
}

// --- routing -----------------------------------------------------------------------------------
const VIEWS = { queue: viewQueue, pool: viewPool, labs: viewLabs, jobs: viewJobs, job: viewJob, submit: null };

async function render() {
  const [, name = "queue", arg] = (location.hash || "#/queue").split("/");
  const view = name in VIEWS ? name : "queue";
  document.querySelectorAll(".view").forEach((s) => { s.hidden = s.id !== "view-" + view; });
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.hash === "#/" + view));
  refreshBanner();
  if (!VIEWS[view]) return;
  try { await VIEWS[view](arg && decodeURIComponent(arg)); showError(null); } catch (e) { showError(e); }
}

async function whoami() {
  if (!state.token) { $("whoami").textContent = ""; return; }
  try { const me = await api("/v1/me"); $("whoami").textContent = `${me.user} (${me.lab}, ${me.role})`; }
  catch (_) { $("whoami").textContent = ""; }
}

function start() {
  applyStrings();
  $("token-input").value = state.token;
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("token-input").value.trim();
    localStorage.setItem("jpu.token", state.token);
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
  $("job-log-attempt").addEventListener("change", (ev) => {
    if (!state.log) return;
    state.log.pinned = true; state.log.attempt = Number(ev.target.value); refreshLog();
  });
  document.querySelectorAll("input[name=job-log-stream]").forEach((r) => r.addEventListener("change", () => {
    if (state.log && r.checked) { state.log.stream = r.value; refreshLog(); }
  }));
  // the log pane of a running attempt: new output every 2 s (the rest of the page every 5 s)
  setInterval(() => {
    if (!document.hidden && location.hash.startsWith("#/job/") && state.log && !state.log.ended) refreshLog();
  }, 2000);
  window.addEventListener("hashchange", render);
  whoami(); render();
  state.timer = setInterval(() => { if (!document.hidden && !location.hash.startsWith("#/submit")) render(); }, 5000);
}

start();
